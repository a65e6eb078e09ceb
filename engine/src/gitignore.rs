//! What pipe keeps out of git: its own directory, by a `.gitignore` of
//! `*` inside it (as tools' own cache folders do, so a project that never
//! ran `pipe init` does not commit its cache on `git add -A`), and the
//! outputs of command stages, which pipe's cache holds and restores, by
//! lines it adds to the project's `.gitignore` (as DVC's `repro` does).
//! An output declared `cache: false` is one the user commits: it is left
//! out.

use std::io::Write;
use std::path::Path;

use crate::{EngineError, Result};

/// What `.pipe/.gitignore` holds.
const STATE_DIR_IGNORE: &str =
    "# pipe's own state (cache, run records, logs): never committed. Written by pipe.\n*\n";

/// The most of a project's `.gitignore` pipe reads: far more than any
/// hand-written one, and past it the outputs are left to the user.
const GITIGNORE: pipe_cache::untrusted::Limit = pipe_cache::untrusted::Limit {
    bytes: 16 << 20,
    what: "a .gitignore",
};

/// The comment above the lines pipe adds to a project's `.gitignore`.
const OUTPUTS_HEADER: &str = "# Outputs of pipe's stages: its cache holds them and `pipe run` or `pipe checkout`\n# restores them (an output declared `cache: false` is left for git to track).\n";

/// Writes `state_dir/.gitignore` unless something is there already; a
/// failure to is only logged, as pipe works without it.
pub fn ignore_state_dir(state_dir: &Path) {
    let path = state_dir.join(".gitignore");
    if std::fs::symlink_metadata(&path).is_ok() {
        return;
    }
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .and_then(|mut file| file.write_all(STATE_DIR_IGNORE.as_bytes()));
    match written {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => tracing::debug!("cannot write {}: {error}", path.display()),
    }
}

/// Creates `path` holding `text`, refusing one that appeared since the
/// caller checked: how `pipe init` writes its files and a new
/// `.gitignore`, never over the user's.
pub(crate) fn write_new(path: &Path, text: &str) -> Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|e| EngineError::io(path, e))
}

/// How `.gitignore` was brought to ignore what it must.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ignored {
    /// Every line was there.
    Already,
    /// The file was made, holding these lines.
    Created(Vec<String>),
    /// These lines were added to the file.
    Added(Vec<String>),
}

/// Ensures `root/.gitignore` holds a line for each of `paths`
/// (project-relative, normalised; a directory may end in `/`), each
/// anchored at the root and escaped as gitignore reads patterns; a path
/// gitignore cannot spell (a line break) is left out. Lines already there
/// are matched exactly, so a file is read once and written only when a
/// line is missing.
pub fn ignore_paths(root: &Path, paths: &[&str]) -> Result<Ignored> {
    let path = root.join(".gitignore");
    let wanted: Vec<String> = paths.iter().filter_map(|path| pattern_for(path)).collect();
    // A clone may hold `.gitignore` as a link (to `/dev/zero`) or a FIFO:
    // refused, which costs a warning, never a hang or memory without end.
    let text = match pipe_cache::untrusted::read_through_links(&path, GITIGNORE) {
        Ok(bytes) => Some(String::from_utf8(bytes).map_err(|_| {
            EngineError::io(
                &path,
                std::io::Error::new(std::io::ErrorKind::InvalidData, "is not UTF-8"),
            )
        })?),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => return Err(EngineError::io(&path, error)),
    };
    let present: std::collections::HashSet<&str> = text
        .as_deref()
        .unwrap_or_default()
        .lines()
        .map(str::trim_end)
        .collect();
    let mut missing: Vec<String> = Vec::new();
    for line in wanted {
        if !present.contains(line.as_str()) && !missing.contains(&line) {
            missing.push(line);
        }
    }
    // A pattern of the user's own (`*.json`, `out/`) may ignore it already.
    if !missing.is_empty() {
        let ignored = ignored_by_git(root, &missing);
        missing.retain(|line| !ignored.contains(line));
    }
    if missing.is_empty() {
        return Ok(Ignored::Already);
    }
    let mut addition = String::new();
    if let Some(text) = &text {
        if !text.is_empty() && !text.ends_with('\n') {
            addition.push('\n');
        }
    }
    if !present.contains(OUTPUTS_HEADER.lines().next().unwrap_or_default()) {
        addition.push_str(OUTPUTS_HEADER);
    }
    for line in &missing {
        addition.push_str(line);
        addition.push('\n');
    }
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .and_then(|mut file| file.write_all(addition.as_bytes()))
        .map_err(|e| EngineError::io(&path, e))?;
    Ok(match text {
        None => Ignored::Created(missing),
        Some(_) => Ignored::Added(missing),
    })
}

/// Of `lines` (anchored patterns naming one path each), those whose path
/// git's ignore rules already exclude, as `git check-ignore` answers for
/// the patterns alone (`--no-index`: a tracked file counts too). Nothing,
/// where git cannot answer: then the lines are added, which is harmless.
fn ignored_by_git(root: &Path, lines: &[String]) -> std::collections::HashSet<String> {
    use std::process::Command;
    let unescape = |line: &str| -> String {
        let mut path = String::new();
        let mut chars = line.trim_start_matches('/').chars();
        while let Some(ch) = chars.next() {
            if ch == '\\' {
                path.extend(chars.next());
            } else {
                path.push(ch);
            }
        }
        path
    };
    let paths: Vec<String> = lines.iter().map(|line| unescape(line)).collect();
    // git would wait forever on a FIFO planted as HEAD (and is killed past
    // its deadline on one planted elsewhere).
    if !crate::runs::git_can_answer(root) {
        return Default::default();
    }
    let mut command = Command::new("git");
    command
        .arg("-C")
        .arg(root)
        .args(["check-ignore", "--no-index", "-z", "--stdin"]);
    let mut input = Vec::new();
    for path in &paths {
        input.extend_from_slice(path.trim_end_matches('/').as_bytes());
        input.push(0);
    }
    let Some(output) = crate::runs::git_output(command, Some(input)) else {
        return Default::default();
    };
    let answered: std::collections::HashSet<&[u8]> =
        output.stdout.split(|&byte| byte == 0).collect();
    lines
        .iter()
        .zip(&paths)
        .filter(|(_, path)| answered.contains(path.trim_end_matches('/').as_bytes()))
        .map(|(line, _)| line.clone())
        .collect()
}

/// A gitignore line matching exactly the project-relative `path`:
/// anchored with `/`, with gitignore's special characters escaped.
fn pattern_for(path: &str) -> Option<String> {
    if path.is_empty() || path.contains(['\n', '\r']) {
        return None;
    }
    let (body, directory) = match path.strip_suffix('/') {
        Some(body) => (body, "/"),
        None => (path, ""),
    };
    let mut line = String::from("/");
    for ch in body.chars() {
        if matches!(ch, '*' | '?' | '[' | '\\' | '!' | '#') {
            line.push('\\');
        }
        line.push(ch);
    }
    // A trailing space is dropped by git unless escaped.
    if line.ends_with(' ') {
        line.pop();
        line.push_str("\\ ");
    }
    line.push_str(directory);
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_anchored_and_escaped() {
        assert_eq!(
            pattern_for("eval/metrics.json").unwrap(),
            "/eval/metrics.json"
        );
        assert_eq!(pattern_for("out/").unwrap(), "/out/");
        assert_eq!(pattern_for("a*b/#c!").unwrap(), "/a\\*b/\\#c\\!");
        assert_eq!(pattern_for("trail ").unwrap(), "/trail\\ ");
        assert_eq!(pattern_for("two\nlines"), None);
    }

    #[test]
    fn lines_are_added_once_under_one_header() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".gitignore"), "*.pyc").unwrap();
        let first = ignore_paths(dir.path(), &["model.pkl", "eval/metrics.json"]).unwrap();
        assert_eq!(
            first,
            Ignored::Added(vec!["/model.pkl".into(), "/eval/metrics.json".into()])
        );
        assert_eq!(
            ignore_paths(dir.path(), &["model.pkl"]).unwrap(),
            Ignored::Already
        );
        ignore_paths(dir.path(), &["data/features"]).unwrap();
        let text = std::fs::read_to_string(dir.path().join(".gitignore")).unwrap();
        assert!(
            text.starts_with("*.pyc\n# Outputs of pipe's stages"),
            "{text}"
        );
        assert_eq!(
            text.matches("# Outputs of pipe's stages").count(),
            1,
            "{text}"
        );
        assert!(
            text.ends_with("/eval/metrics.json\n/data/features\n"),
            "{text}"
        );
    }

    #[test]
    fn the_state_dir_ignores_itself_and_a_users_file_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        ignore_state_dir(dir.path());
        let text = std::fs::read_to_string(dir.path().join(".gitignore")).unwrap();
        assert!(text.lines().any(|line| line == "*"));
        std::fs::write(dir.path().join(".gitignore"), "mine\n").unwrap();
        ignore_state_dir(dir.path());
        assert_eq!(
            std::fs::read_to_string(dir.path().join(".gitignore")).unwrap(),
            "mine\n"
        );
    }
}
