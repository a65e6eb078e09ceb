//! The `-S` values a run writes into `params.yaml` while its commands
//! run, so that a command that reads its params from the file by itself
//! (`params: [train]`, DVC's habit) sees the value the run records.
//!
//! Each edit replaces one scalar of the file, character for character at
//! the place it was read from: comments, order and every other value stay
//! as they are, and the file is put back byte for byte when the run ends
//! (`crate::params_override`).

use std::path::PathBuf;

/// What `params.yaml` holds during a run with `-S` overrides of values it
/// sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamsFileEdits {
    /// `params.yaml` beside the pipeline file, absolute.
    pub file: PathBuf,
    /// BLAKE3 of the text the pipeline was loaded from, hex: the places of
    /// the edits hold only in that text.
    pub loaded: String,
    /// One per overridden param, in the order of the `-S` arguments.
    pub edits: Vec<ParamEdit>,
}

/// One scalar of `params.yaml` replaced by the value of an override.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamEdit {
    /// The dotted param path (`train.alpha`).
    pub path: String,
    /// 1-based line, and 1-based character column and width of the scalar
    /// as written (quotes included).
    pub line: usize,
    pub col: usize,
    pub len: usize,
    /// The value as YAML that YAML 1.1 readers (PyYAML) and 1.2 readers
    /// read alike: `0.2`, `1.0e-05`, `"bf16-mixed"`, `[1, 2]`.
    pub text: String,
}

impl ParamsFileEdits {
    /// `text` with every edit made, or `None` when a place is not in it
    /// (the file is not the one the edits were found in).
    pub fn apply(&self, text: &str) -> Option<String> {
        let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
        let mut edits: Vec<&ParamEdit> = self.edits.iter().collect();
        // Right to left within a line, so that earlier columns stay put.
        edits.sort_by_key(|edit| (edit.line, std::cmp::Reverse(edit.col)));
        for edit in edits {
            let line = lines.get_mut(edit.line.checked_sub(1)?)?;
            let chars: Vec<char> = line.chars().collect();
            let start = edit.col.checked_sub(1)?;
            let end = start.checked_add(edit.len)?;
            if end > chars.len() || chars[start..end].contains(&'\n') {
                return None;
            }
            let mut replaced: String = chars[..start].iter().collect();
            replaced.push_str(&edit.text);
            replaced.extend(&chars[end..]);
            *line = replaced;
        }
        Some(lines.concat())
    }
}

/// Whether one dotted param path holds the other (`train` and
/// `train.lr`), or they are the same.
pub fn paths_overlap(a: &str, b: &str) -> bool {
    let holds = |outer: &str, inner: &str| {
        inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    };
    holds(a, b) || holds(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edits(list: Vec<(usize, usize, usize, &str)>) -> ParamsFileEdits {
        ParamsFileEdits {
            file: PathBuf::from("/p/params.yaml"),
            loaded: String::new(),
            edits: list
                .into_iter()
                .map(|(line, col, len, text)| ParamEdit {
                    path: "x".into(),
                    line,
                    col,
                    len,
                    text: text.into(),
                })
                .collect(),
        }
    }

    #[test]
    fn edits_replace_the_scalar_and_keep_comments_and_other_lines() {
        let text = "# mine\ntrain:\n  alpha: 1.0  # the weight\n  name: 'é x'\n";
        let applied = edits(vec![(3, 10, 3, "0.2"), (4, 9, 5, "\"y\"")])
            .apply(text)
            .unwrap();
        assert_eq!(
            applied,
            "# mine\ntrain:\n  alpha: 0.2  # the weight\n  name: \"y\"\n"
        );
    }

    #[test]
    fn two_edits_on_one_line_both_land() {
        let text = "a: {x: 1, y: 22}\n";
        let applied = edits(vec![(1, 8, 1, "10"), (1, 14, 2, "3")])
            .apply(text)
            .unwrap();
        assert_eq!(applied, "a: {x: 10, y: 3}\n");
    }

    #[test]
    fn an_edit_outside_the_text_is_refused() {
        assert_eq!(edits(vec![(5, 1, 1, "0")]).apply("a: 1\n"), None);
        assert_eq!(edits(vec![(1, 4, 3, "0")]).apply("a: 1\n"), None);
    }

    #[test]
    fn paths_overlap_by_whole_keys() {
        assert!(paths_overlap("train", "train.lr"));
        assert!(paths_overlap("train.lr", "train"));
        assert!(paths_overlap("seed", "seed"));
        assert!(!paths_overlap("train", "trainer.lr"));
        assert!(!paths_overlap("train.lr", "train.lr2"));
    }
}
