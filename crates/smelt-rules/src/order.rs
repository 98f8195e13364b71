//! Which of a key's changes is the latest (DESIGN §3.4): the greatest sequence wins (a NULL
//! sequence value is the lowest); a tie goes to the change read last — the later commit,
//! then the later file in the commit, then the later row in the file.
//!
//! The embedded engine reads changes in this order and keeps the later row of a tie
//! (`smelt_core::dedupe`); the Spark engine reads the three position columns with each
//! change and ranks by [`latest_first`].

/// The change's commit version.
pub const COMMIT_VERSION: &str = "_commit_version";
/// The position of the change's file among the files its commit added.
pub const FILE_POS: &str = "_file_pos";
/// The position of the change's row in its file.
pub const ROW_POS: &str = "_row_pos";

/// The read order, most significant first: what breaks a tie of sequences.
pub const READ_ORDER: [&str; 3] = [COMMIT_VERSION, FILE_POS, ROW_POS];

/// One column of an ordering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    /// The column.
    pub column: String,
    /// Greatest first.
    pub descending: bool,
    /// NULL sorts below every value (the only rule smelt has: a NULL sequence is the lowest).
    pub nulls_lowest: bool,
}

impl SortKey {
    fn new(column: &str, descending: bool) -> Self {
        Self {
            column: column.to_string(),
            descending,
            nulls_lowest: true,
        }
    }
}

/// One key's changes ranked latest first: the sequence columns (as read), greatest first,
/// NULL lowest; then the read order, last read first.
pub fn latest_first(sequence: &[String]) -> Vec<SortKey> {
    sequence
        .iter()
        .map(|s| SortKey::new(s, true))
        .chain(READ_ORDER.iter().map(|c| SortKey::new(c, true)))
        .collect()
}

/// The read order, last read first: which of a sequence's changes wins its tie.
pub fn last_read_first() -> Vec<SortKey> {
    READ_ORDER.iter().map(|c| SortKey::new(c, true)).collect()
}

/// The read order, first read first: which of several failing changes a message names.
pub fn read_order() -> Vec<SortKey> {
    READ_ORDER.iter().map(|c| SortKey::new(c, false)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_then_the_read_order_last_first() {
        let keys = latest_first(&["seq".to_string()]);
        let cols: Vec<&str> = keys.iter().map(|k| k.column.as_str()).collect();
        assert_eq!(cols, ["seq", "_commit_version", "_file_pos", "_row_pos"]);
        assert!(keys.iter().all(|k| k.descending && k.nulls_lowest));
        assert!(read_order().iter().all(|k| !k.descending));
        assert_eq!(last_read_first(), keys[1..]);
    }
}
