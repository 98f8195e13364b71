//! [`SpecError`]: one problem in a pipeline file or table definition, with its file, line,
//! field and hint; [`SpecErrors`] collects every problem of one validation phase.

use std::fmt;
use std::path::PathBuf;

/// One problem in a pipeline file or table definition, with where it is and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// The file the problem is in.
    pub file: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// Dotted path of the field, e.g. `flows.product2.apply.keys` (empty for the whole file).
    pub field: String,
    /// What is wrong.
    pub message: String,
    /// The next step, if there is one.
    pub hint: Option<String>,
}

impl SpecError {
    /// A new error without line or hint.
    pub fn new(
        file: impl Into<PathBuf>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            file: file.into(),
            line: None,
            field: field.into(),
            message: message.into(),
            hint: None,
        }
    }

    /// Sets the line.
    pub fn at(mut self, line: Option<usize>) -> Self {
        self.line = line;
        self
    }

    /// Sets the hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": `{}`", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Every problem found in one validation phase. Never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            many => {
                write!(f, "{} problems in the pipeline:", many.len())?;
                for e in many {
                    write!(f, "\n  - {e}")?;
                    if let Some(h) = &e.hint {
                        write!(f, " (hint: {h})")?;
                    }
                }
                Ok(())
            }
        }
    }
}

impl From<SpecError> for SpecErrors {
    fn from(e: SpecError) -> Self {
        SpecErrors(vec![e])
    }
}

/// Result alias of the spec crate.
pub type Result<T, E = SpecErrors> = std::result::Result<T, E>;

/// The closest candidate to `word` (case-insensitive edit distance ≤ 2, and less than the
/// word's length), for "did you mean".
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let w = word.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (levenshtein(&w, &c.to_lowercase()), c))
        // Within two edits (a quarter of a long word), and fewer than the word has letters:
        // `x` is no misspelling of `Id`.
        .filter(|(d, _)| *d <= 2.max(w.len() / 4) && *d < w.chars().count())
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_near_misses_only() {
        assert_eq!(did_you_mean("Idd", ["Id", "Name"]), Some("Id"));
        assert_eq!(did_you_mean("zzz", ["Id", "Name"]), None);
        // A one-letter word is no misspelling of a two-letter name.
        assert_eq!(did_you_mean("x", ["Id", "Name"]), None);
        assert_eq!(did_you_mean("ix", ["Id", "Name"]), Some("Id"));
        assert_eq!(
            did_you_mean("sequnce_by", ["sequence_by", "keys"]),
            Some("sequence_by")
        );
    }
}
