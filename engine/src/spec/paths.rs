//! Project-relative paths for deps, outs and metrics.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathProblem {
    Empty,
    Absolute,
    EscapesRoot,
    IsRoot,
}

/// `./a//b/` -> `a/b`, `a/../b` -> `b`. Paths are compared as text
/// afterwards, so every spelling of one path must normalise alike.
pub(crate) fn normalize(path: &str) -> Result<String, PathProblem> {
    if path.trim().is_empty() {
        return Err(PathProblem::Empty);
    }
    if path.starts_with('/') || path.starts_with('~') || looks_like_windows_drive(path) {
        return Err(PathProblem::Absolute);
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(PathProblem::EscapesRoot);
                }
            }
            _ => parts.push(part),
        }
    }
    if parts.is_empty() {
        return Err(PathProblem::IsRoot);
    }
    Ok(parts.join("/"))
}

fn looks_like_windows_drive(path: &str) -> bool {
    let bytes = path.as_bytes();
    bytes.len() >= 3
        && bytes[0].is_ascii_alphabetic()
        && bytes[1] == b':'
        && (bytes[2] == b'\\' || bytes[2] == b'/')
}

/// `a/b/c` -> `a/b`, `a`: the directories that could hold `path`.
pub(crate) fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.char_indices()
        .rev()
        .filter(|(_, ch)| *ch == '/')
        .map(move |(index, _)| &path[..index])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_and_refuses_escapes() {
        assert_eq!(normalize("./a//b/"), Ok("a/b".to_string()));
        assert_eq!(normalize("a/../b"), Ok("b".to_string()));
        assert_eq!(normalize("../x"), Err(PathProblem::EscapesRoot));
        assert_eq!(normalize("/etc/passwd"), Err(PathProblem::Absolute));
        assert_eq!(normalize("./"), Err(PathProblem::IsRoot));
        assert_eq!(normalize(""), Err(PathProblem::Empty));
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), vec!["a/b", "a"]);
    }
}
