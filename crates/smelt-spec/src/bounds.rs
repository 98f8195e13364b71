//! The `{min(col)}` / `{max(col)}` bounds of a replace_where predicate: found once, here, for
//! the pipeline file's checks and for both engines, which fill each with the batch's least or
//! greatest value of the column, as a literal of its type.

/// A `{min(col)}` or `{max(col)}` bound of a predicate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder {
    /// As written, braces included.
    pub text: String,
    /// `max` (else `min`).
    pub max: bool,
    /// The target column bounded.
    pub column: String,
    /// Inside a string literal (`'…{min(d)}…'`), where it is not filled: refused at load.
    pub quoted: bool,
}

/// The bounds of `predicate`, in order; other braces are not bounds.
pub fn placeholders(predicate: &str) -> Vec<Placeholder> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(open) = predicate[at..].find('{').map(|i| at + i) {
        let Some(close) = predicate[open..].find('}').map(|i| open + i) else {
            break;
        };
        let text = &predicate[open..=close];
        let inner = text[1..text.len() - 1].trim();
        let call = inner
            .strip_prefix("min(")
            .map(|c| (false, c))
            .or_else(|| inner.strip_prefix("max(").map(|c| (true, c)));
        if let Some((max, column)) = call
            && let Some(column) = column.strip_suffix(')')
        {
            out.push(Placeholder {
                text: text.to_string(),
                max,
                column: column.trim().trim_matches('"').to_string(),
                // An odd number of quotes before it: a string is open (`''` counts twice).
                quoted: predicate[..open].matches('\'').count() % 2 == 1,
            });
        }
        at = close + 1;
    }
    out
}

/// A predicate with each bound a NULL: what its syntax is checked on before a batch fills
/// the bounds. Other braces are left as they are, so the syntax check refuses them.
pub fn without_bounds(text: &str) -> String {
    let mut out = text.to_string();
    for p in placeholders(text) {
        out = out.replacen(&p.text, "NULL", 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_found_with_their_column_and_kind() {
        let p = placeholders("updated_at >= {min(updated_at)} AND id <= { max(\"Id\") } {x}");
        let got: Vec<(&str, bool, &str, bool)> = p
            .iter()
            .map(|p| (p.text.as_str(), p.max, p.column.as_str(), p.quoted))
            .collect();
        assert_eq!(
            got,
            [
                ("{min(updated_at)}", false, "updated_at", false),
                ("{ max(\"Id\") }", true, "Id", false),
            ]
        );
    }

    #[test]
    fn a_bound_inside_a_string_literal_is_marked() {
        let p = placeholders("note = 'from {min(d)}' AND d >= {min(d)} AND s = 'it''s {max(d)}'");
        let quoted: Vec<bool> = p.iter().map(|p| p.quoted).collect();
        assert_eq!(quoted, [true, false, true]);
    }

    #[test]
    fn only_min_and_max_bounds_are_nulled() {
        assert_eq!(
            without_bounds("d >= {min(d)} AND d <= { max(\"d\") }"),
            "d >= NULL AND d <= NULL"
        );
        assert_eq!(without_bounds("d >= {x}"), "d >= {x}");
    }
}
