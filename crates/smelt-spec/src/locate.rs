//! Finds the line of a field in YAML text, for errors found after deserialising.

/// 1-based line of the mapping key at `path` (e.g. `["flows", "p", "apply", "keys"]`),
/// following indentation. `None` when the path is not written in block style.
pub(crate) fn line_of(text: &str, path: &[&str]) -> Option<usize> {
    let mut depth = 0;
    let mut min_indent: isize = -1;
    let mut found_line = None;
    for (n, raw) in text.lines().enumerate() {
        if depth == path.len() {
            break;
        }
        let line = raw.split(" #").next().unwrap_or(raw);
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = (line.len() - trimmed.len()) as isize;
        if indent <= min_indent {
            // Left the block of the last matched key without finding the next one.
            if depth > 0 {
                return found_line;
            }
        }
        let key = trimmed
            .trim_start_matches("- ")
            .split(':')
            .next()
            .unwrap_or("")
            .trim();
        let key = key.trim_matches(|c| c == '"' || c == '\'');
        if key == path[depth] && trimmed.contains(':') {
            depth += 1;
            min_indent = indent;
            found_line = Some(n + 1);
        }
    }
    found_line
}

#[cfg(test)]
mod tests {
    use super::line_of;

    #[test]
    fn follows_indentation() {
        let text = "lake: x\nflows:\n  a:\n    apply:\n      keys: [k]\n  b:\n    apply:\n      # c\n      keys: [j]\n";
        assert_eq!(line_of(text, &["flows", "b", "apply", "keys"]), Some(9));
        assert_eq!(line_of(text, &["flows", "a", "apply", "keys"]), Some(5));
        assert_eq!(line_of(text, &["lake"]), Some(1));
        // Missing leaf: the nearest parent line.
        assert_eq!(
            line_of(text, &["flows", "a", "apply", "sequence_by"]),
            Some(4)
        );
    }
}
