//! A matrix found from the files present (Snakemake's `glob_wildcards`):
//!
//! ```yaml
//! matrix:
//!   files: data/raw/{sample}.csv
//! ```
//!
//! Each file that matches is one expansion, and each `{KEY}` of the
//! pattern a matrix key its stages name as `${matrix.KEY}`. The pattern is
//! read anew whenever the pipeline loads, so a file added or removed adds
//! or removes its expansions; what depends on every expansion
//! (`${stages.S@*.outs.O}`) depends on the list, so it reruns too.

use std::path::Path;

use super::matrix_records::{bad_value_text, is_valid_identifier};
use crate::pipeline::matrix::{MatrixAxis, MatrixValue, MAX_STAGES};
use crate::project_files::collect::Diagnostics;
use crate::project_files::source::Sources;
use crate::project_files::yaml::Node;
use crate::Diagnostic;

/// The key of a matrix mapping whose value is a file pattern.
pub(super) const FILES_KEY: &str = "files";

/// At most this many parts (`{KEY}`, `*`, text) in one path segment:
/// matching backtracks, and a name is matched against every entry of a
/// directory.
const MAX_PARTS_PER_SEGMENT: usize = 16;

#[derive(Debug, PartialEq)]
enum Part {
    Text(String),
    /// The index of a key in `FilePattern::keys`.
    Key(usize),
    /// `*`: any text within the segment, not captured.
    Star,
}

#[derive(Debug)]
struct FilePattern {
    /// One per `/`-separated segment.
    segments: Vec<Vec<Part>>,
    /// In the order they first appear.
    keys: Vec<String>,
}

/// The axes (one per `{KEY}`, all of group `group`) of the files under
/// `root` that `node`'s pattern matches, sorted by path; a combination
/// that several files give (`{sample}_*.fastq` over `R1` and `R2`) is one
/// expansion.
pub(super) fn file_axes(
    stage: &str,
    node: &Node,
    pattern_text: &str,
    root: &Path,
    group: u16,
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) -> Option<Vec<MatrixAxis>> {
    let at = sources.location(node.span);
    let pattern = match parse(pattern_text) {
        Ok(pattern) => pattern,
        Err((message, hint)) => {
            diagnostics.push(
                Diagnostic::new(
                    "bad-file-pattern",
                    format!("`matrix.{FILES_KEY}` of stage `{stage}`: {message}"),
                )
                .at(at)
                .with_hint(hint),
            );
            return None;
        }
    };
    let mut found: Vec<(String, Vec<String>)> = Vec::new();
    let mut captures = vec![None; pattern.keys.len()];
    if let Err(problem) = walk(
        root,
        &pattern.segments,
        String::new(),
        &mut captures,
        &mut found,
    ) {
        diagnostics.push(
            Diagnostic::new(
                "bad-file-pattern",
                format!("`matrix.{FILES_KEY}` of stage `{stage}`: {problem}"),
            )
            .at(at)
            .with_hint("narrow the pattern, or split the files into several directories"),
        );
        return None;
    }
    if found.is_empty() {
        diagnostics.push(
            Diagnostic::new(
                "empty-matrix",
                format!("no file matches `{pattern_text}` (`matrix.{FILES_KEY}` of stage `{stage}`)"),
            )
            .at(at)
            .with_hint("the pattern is relative to the project root, and `{KEY}` matches one or more characters of a name (not `/`, not a leading `.`); files a stage makes are not there before it runs, so list those values instead"),
        );
        return None;
    }
    found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut seen = std::collections::HashSet::with_capacity(found.len());
    found.retain(|(_, values)| seen.insert(values.clone()));
    if found.len() > MAX_STAGES {
        diagnostics.push(
            Diagnostic::new(
                "matrix-too-large",
                format!(
                    "`{pattern_text}` matches {} files (stage `{stage}`); a pipeline may have at most {MAX_STAGES} stages",
                    found.len()
                ),
            )
            .at(at)
            .with_hint("narrow the pattern"),
        );
        return None;
    }
    let mut ok = true;
    for (path, values) in &found {
        for (key, value) in pattern.keys.iter().zip(values) {
            if let Some(what) = bad_value_text(value) {
                diagnostics.push(
                    Diagnostic::new(
                        "bad-matrix-value",
                        format!(
                            "file `{}` gives `{key}` the value `{}`, which {what} (`matrix.{FILES_KEY}` of stage `{stage}`)",
                            pipe_protocol::excerpt(path),
                            pipe_protocol::excerpt(value)
                        ),
                    )
                    .at(at.clone())
                    .with_hint("matrix values name the expanded stages (`clean@sample=S001`): rename the file to letters, digits and `_ . - + :`, or narrow the pattern so that it does not match it"),
                );
                ok = false;
            }
        }
    }
    if !ok {
        return None;
    }
    Some(
        pattern
            .keys
            .iter()
            .enumerate()
            .map(|(index, key)| MatrixAxis {
                key: key.clone(),
                values: found
                    .iter()
                    .map(|(_, values)| MatrixValue {
                        json: serde_json::Value::String(values[index].clone()),
                        text: values[index].clone(),
                    })
                    .collect(),
                group,
            })
            .collect(),
    )
}

fn parse(text: &str) -> Result<FilePattern, (String, String)> {
    let example = "write a path relative to the project root with a `{KEY}` for each part that varies, e.g. `data/raw/{sample}.csv`";
    if text.starts_with('/') || text.is_empty() {
        return Err((
            format!("`{text}` is not a path inside the project"),
            example.to_string(),
        ));
    }
    let mut keys: Vec<String> = Vec::new();
    let mut segments = Vec::new();
    for segment in text.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err((
                format!("`{text}` has an empty, `.` or `..` part"),
                example.to_string(),
            ));
        }
        if segment.contains("**") {
            return Err((
                format!("`**` in `{text}`: a pattern matches one directory level per part"),
                "write one part per level (`data/*/{sample}.csv`), or one pattern per depth in separate stages".to_string(),
            ));
        }
        let mut parts = Vec::new();
        let mut rest = segment;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('{') {
                let Some(end) = after.find('}') else {
                    return Err((
                        format!("`{{` without `}}` in `{text}`"),
                        example.to_string(),
                    ));
                };
                let key = &after[..end];
                if !is_valid_identifier(key) {
                    return Err((
                        format!("`{{{key}}}` in `{text}` is not a matrix key"),
                        "keys use letters, digits and `_`, and start with a letter or `_`, so `${matrix.KEY}` can name them".to_string(),
                    ));
                }
                let index = match keys.iter().position(|known| known == key) {
                    Some(index) => index,
                    None => {
                        keys.push(key.to_string());
                        keys.len() - 1
                    }
                };
                if matches!(parts.last(), Some(Part::Key(_) | Part::Star)) {
                    return Err((
                        format!("`{{{key}}}` follows another `{{KEY}}` or `*` in `{text}` with nothing between"),
                        "put a separator between them (`{batch}_{sample}`), so each file names one value of each".to_string(),
                    ));
                }
                parts.push(Part::Key(index));
                rest = &after[end + 1..];
            } else if let Some(after) = rest.strip_prefix('*') {
                if matches!(parts.last(), Some(Part::Key(_))) {
                    return Err((
                        format!("`*` follows a `{{KEY}}` in `{text}` with nothing between"),
                        "put a separator between them, so each file names one value".to_string(),
                    ));
                }
                parts.push(Part::Star);
                rest = after;
            } else if rest.starts_with('}') {
                return Err((
                    format!("`}}` without `{{` in `{text}`"),
                    example.to_string(),
                ));
            } else {
                let end = rest.find(['{', '}', '*']).unwrap_or(rest.len());
                parts.push(Part::Text(rest[..end].to_string()));
                rest = &rest[end..];
            }
        }
        if parts.len() > MAX_PARTS_PER_SEGMENT {
            return Err((
                format!("a part of `{text}` has more than {MAX_PARTS_PER_SEGMENT} pieces"),
                example.to_string(),
            ));
        }
        segments.push(parts);
    }
    if keys.is_empty() {
        return Err((
            format!("`{text}` has no `{{KEY}}`"),
            "name what varies between the files, e.g. `data/raw/{sample}.csv`, which gives the key `sample`".to_string(),
        ));
    }
    Ok(FilePattern { segments, keys })
}

/// Every path under `root` that `segments` match below `prefix`, with the
/// value of each key.
fn walk(
    root: &Path,
    segments: &[Vec<Part>],
    prefix: String,
    captures: &mut Vec<Option<String>>,
    found: &mut Vec<(String, Vec<String>)>,
) -> Result<(), String> {
    let Some((segment, rest)) = segments.split_first() else {
        found.push((
            prefix,
            captures
                .iter()
                .map(|value| value.clone().unwrap_or_default())
                .collect(),
        ));
        return Ok(());
    };
    let join = |name: &str| {
        if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}/{name}")
        }
    };
    if let [Part::Text(name)] = segment.as_slice() {
        let path = join(name);
        let there = if rest.is_empty() {
            std::fs::symlink_metadata(root.join(&path)).is_ok()
        } else {
            root.join(&path).is_dir()
        };
        if there {
            walk(root, rest, path, captures, found)?;
        }
        return Ok(());
    }
    let dir = root.join(if prefix.is_empty() { "." } else { &prefix });
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(_) => return Ok(()),
    };
    let mut names: Vec<String> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| format!("cannot read `{}`: {error}", dir.display()))?;
        // A name that is not UTF-8 cannot be a matrix value nor a path of
        // the pipeline file.
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
        if found.len() + names.len() > MAX_STAGES * 2 {
            return Err(format!("`{}` holds too many entries", dir.display()));
        }
    }
    names.sort_unstable();
    let leading_dot = matches!(segment.first(), Some(Part::Text(text)) if text.starts_with('.'));
    for name in names {
        if name.starts_with('.') && !leading_dot {
            continue;
        }
        let path = join(&name);
        if !rest.is_empty() && !root.join(&path).is_dir() {
            continue;
        }
        let saved = captures.clone();
        if matches(segment, &name, captures) {
            walk(root, rest, path, captures, found)?;
        }
        *captures = saved;
    }
    Ok(())
}

/// Whether `name` matches `parts`, each `{KEY}` taking the longest text
/// it can (one or more characters) and agreeing with what the key took
/// elsewhere in the path.
fn matches(parts: &[Part], name: &str, captures: &mut [Option<String>]) -> bool {
    let Some((part, rest)) = parts.split_first() else {
        return name.is_empty();
    };
    match part {
        Part::Text(text) => name
            .strip_prefix(text.as_str())
            .is_some_and(|after| matches(rest, after, captures)),
        Part::Key(index) => {
            if let Some(known) = captures[*index].clone() {
                return name
                    .strip_prefix(known.as_str())
                    .is_some_and(|after| !known.is_empty() && matches(rest, after, captures));
            }
            for end in (1..=name.len())
                .rev()
                .filter(|&end| name.is_char_boundary(end))
            {
                captures[*index] = Some(name[..end].to_string());
                if matches(rest, &name[end..], captures) {
                    return true;
                }
            }
            captures[*index] = None;
            false
        }
        Part::Star => (0..=name.len())
            .rev()
            .filter(|&end| name.is_char_boundary(end))
            .any(|end| matches(rest, &name[end..], captures)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured(pattern: &str, name: &str) -> Option<Vec<String>> {
        let pattern = parse(pattern).unwrap();
        let mut captures = vec![None; pattern.keys.len()];
        matches(&pattern.segments[0], name, &mut captures).then(|| {
            captures
                .into_iter()
                .map(Option::unwrap_or_default)
                .collect()
        })
    }

    #[test]
    fn a_key_takes_the_longest_text_that_still_lets_the_rest_match() {
        assert_eq!(
            captured("{sample}.csv", "S001.csv"),
            Some(vec!["S001".into()])
        );
        assert_eq!(captured("{sample}.csv", "S001.csv.bak"), None);
        assert_eq!(
            captured("{a}_{b}.csv", "x_y_z.csv"),
            Some(vec!["x_y".into(), "z".into()])
        );
        assert_eq!(captured("{s}_*.fq", "S1_R1.fq"), Some(vec!["S1".into()]));
        assert_eq!(captured("{s}.csv", ".csv"), None);
        assert_eq!(captured("{s}-{s}.csv", "a-a.csv"), Some(vec!["a".into()]));
        assert_eq!(captured("{s}-{s}.csv", "a-b.csv"), None);
    }

    #[test]
    fn a_pattern_that_cannot_name_values_is_refused_with_why() {
        for bad in [
            "/data/{s}.csv",
            "data/../{s}.csv",
            "data/raw.csv",
            "data/{s",
            "data/s}.csv",
            "data/{1s}.csv",
            "data/{a}{b}.csv",
            "data/**/{s}.csv",
            "",
        ] {
            assert!(parse(bad).is_err(), "{bad} parsed");
        }
        assert_eq!(
            parse("data/{batch}/{sample}_{batch}.csv").unwrap().keys,
            vec!["batch".to_string(), "sample".to_string()]
        );
    }
}
