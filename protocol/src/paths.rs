//! Project-relative paths (`ProjectPath`), checked and normalised once,
//! and the rule a path read back from a stored result or a run record
//! must pass (`check_relative_path`). Here because the cache (action
//! results, restores) and the engine (the pipeline, run records) hold the
//! same paths and must refuse the same ones.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// pipe's own directory: cache, run records, built-in stages' outputs.
pub const PIPE_DIR: &str = ".pipe";
/// The repository with its history.
pub const GIT_DIR: &str = ".git";

/// Why a path as written cannot be one in the project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathProblem {
    Empty,
    Absolute,
    EscapesRoot,
    IsRoot,
    /// A NUL byte, which no file name can hold (a YAML `"\0"`, or a param).
    Nul,
}

/// A path inside the project, as pipe keeps it once it has been checked:
/// relative, normal (`a/b`: `/` between parts, no `.`, `..` or empty
/// part), not the root itself, no NUL. The loader makes one for each
/// dependency and output it reads (`ProjectPath::new`), and a path read
/// back from a stored result or a run record is made one by the cache's
/// rule (`ProjectPath::stored`, which its `Deserialize` applies too); code
/// that holds one never checks or normalises it again. It compares,
/// hashes, prints and serialises as its text, so a key manifest, an action
/// file, a run record or a JSON line holds the very string it held when
/// paths were `String`s.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProjectPath(String);

impl ProjectPath {
    /// `./a//b/` -> `a/b`, `a/../b` -> `b`; refused when it is empty,
    /// absolute (`/x`, `~x`, `C:/x`), leaves the project, is the project
    /// itself or holds a NUL. Paths are compared as text afterwards, so
    /// every spelling of one path must normalise alike.
    pub fn new(path: &str) -> Result<ProjectPath, PathProblem> {
        normalize(path).map(ProjectPath)
    }

    /// A path a stored result or a run record names, which pipe did not
    /// write itself this time: taken only when [`check_relative_path`]
    /// finds it plain, normal and outside `.git/` and `.pipe/` but
    /// `.pipe/out/`, whose refusal it returns. What a `ProjectPath` read
    /// with serde must pass.
    pub fn stored(path: &str) -> Result<ProjectPath, &'static str> {
        check_relative_path(path)?;
        Ok(ProjectPath(path.to_string()))
    }

    /// A path under pipe's own layout (`.pipe/out/PIPELINE/STAGE/...`),
    /// composed by pipe from names the loader checked: no user text is
    /// joined in unchecked, so it is taken as written (in debug builds,
    /// asserted normal and stored-safe).
    pub fn of_pipe_layout(path: String) -> ProjectPath {
        debug_assert_eq!(normalize(&path).as_deref(), Ok(path.as_str()));
        debug_assert_eq!(check_relative_path(&path), Ok(()));
        ProjectPath(path)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `.pipe` or `.git` when the path is or lies inside one of them.
    pub fn protected_dir(&self) -> Option<&'static str> {
        protected_dir(&self.0)
    }
}

/// Why `path` cannot be a project-relative path that pipe restores or a
/// record names, if it cannot: it must be relative and normal (no `.`,
/// `..` or empty components), hold no NUL or control character, and stay
/// out of `.git/` (at any depth) and of `.pipe/` except `.pipe/out/`
/// (where built-in stages write).
pub fn check_relative_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("is empty");
    }
    if path.starts_with('/') {
        return Err("is absolute");
    }
    if path.chars().any(|ch| ch.is_control()) {
        return Err("holds a control character");
    }
    let components: Vec<&str> = path.split('/').collect();
    for component in &components {
        match *component {
            "" | "." => return Err("is not in normal form"),
            ".." => return Err("leaves the project"),
            // Case-insensitive file systems (macOS) make `.GIT` the same.
            git if git.eq_ignore_ascii_case(GIT_DIR) => return Err("is inside `.git/`"),
            _ => {}
        }
    }
    let in_state_dir = components[0].eq_ignore_ascii_case(PIPE_DIR);
    if in_state_dir && (components[0] != PIPE_DIR || components.len() < 3 || components[1] != "out")
    {
        return Err("is inside `.pipe/` but not under `.pipe/out/`");
    }
    Ok(())
}

/// `.pipe` or `.git` when the normalised `path` is or lies inside one of
/// them. Compared without case: on a case-insensitive file system `.GIT`
/// is the repository.
pub fn protected_dir(path: &str) -> Option<&'static str> {
    let first = path.split('/').next().unwrap_or(path);
    [PIPE_DIR, GIT_DIR]
        .into_iter()
        .find(|dir| first.eq_ignore_ascii_case(dir))
}

/// The stored rule, with the path in the refusal: what a record or an
/// action file that names it is refused with.
impl TryFrom<String> for ProjectPath {
    type Error = String;

    fn try_from(path: String) -> Result<ProjectPath, String> {
        match check_relative_path(&path) {
            Ok(()) => Ok(ProjectPath(path)),
            Err(problem) => Err(format!("path `{}` {problem}", crate::excerpt(&path))),
        }
    }
}

impl Serialize for ProjectPath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// Read back by the stored rule only: a path in a pulled record, an action
/// file or runs.db is believed no further than `ProjectPath::stored`
/// believes it, and a refused one fails what holds it.
impl<'de> Deserialize<'de> for ProjectPath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ProjectPath, D::Error> {
        let path = String::deserialize(deserializer)?;
        ProjectPath::try_from(path).map_err(serde::de::Error::custom)
    }
}

/// For a list where one refused path is dropped, the rest kept (a
/// record's pages: something to open, not something the record stands
/// on): `#[serde(deserialize_with = "pipe_protocol::paths::dropping_refused")]`.
pub fn dropping_refused<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<ProjectPath>, D::Error> {
    let paths = Vec::<String>::deserialize(deserializer)?;
    Ok(paths
        .into_iter()
        .filter_map(|path| ProjectPath::try_from(path).ok())
        .collect())
}

impl Deref for ProjectPath {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

/// Maps keyed by `String` or `ProjectPath` are looked up with a `&str`.
impl Borrow<str> for ProjectPath {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<Path> for ProjectPath {
    fn as_ref(&self) -> &Path {
        Path::new(&self.0)
    }
}

impl AsRef<str> for ProjectPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProjectPath {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl From<ProjectPath> for String {
    fn from(path: ProjectPath) -> String {
        path.0
    }
}

impl From<&ProjectPath> for String {
    fn from(path: &ProjectPath) -> String {
        path.0.clone()
    }
}

impl PartialEq<str> for ProjectPath {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for ProjectPath {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for ProjectPath {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<ProjectPath> for String {
    fn eq(&self, other: &ProjectPath) -> bool {
        *self == other.0
    }
}

impl PartialEq<ProjectPath> for str {
    fn eq(&self, other: &ProjectPath) -> bool {
        self == other.0
    }
}

/// `./a//b/` -> `a/b`, `a/../b` -> `b`: what `ProjectPath::new` keeps.
fn normalize(path: &str) -> Result<String, PathProblem> {
    if path.trim().is_empty() {
        return Err(PathProblem::Empty);
    }
    if path.contains('\0') {
        return Err(PathProblem::Nul);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const HOSTILE: [&str; 6] = [
        "../x",
        "/etc/passwd",
        ".git/config",
        "a/./b",
        "vendor/.GIT/hooks/pre-commit",
        ".pipe/runs.db",
    ];

    #[test]
    fn normalises_and_refuses_escapes() {
        assert_eq!(normalize("./a//b/"), Ok("a/b".to_string()));
        assert_eq!(normalize("a/../b"), Ok("b".to_string()));
        assert_eq!(normalize("../x"), Err(PathProblem::EscapesRoot));
        assert_eq!(normalize("/etc/passwd"), Err(PathProblem::Absolute));
        assert_eq!(normalize("./"), Err(PathProblem::IsRoot));
        assert_eq!(normalize(""), Err(PathProblem::Empty));
    }

    #[test]
    fn the_stored_rule_refuses_what_pipe_must_not_write() {
        assert!(check_relative_path("data/train.csv").is_ok());
        assert!(check_relative_path(".pipe/out/p/s/model").is_ok());
        assert!(check_relative_path("a/.git/config").is_err());
        assert!(check_relative_path("a//b").is_err());
        assert!(check_relative_path("a\0b").is_err());
        assert!(check_relative_path("a\tb").is_err());
        assert!(check_relative_path(".pipe/out").is_err());
        assert!(check_relative_path(".PIPE/out/p/s").is_err());
        assert!(check_relative_path("a/.Git/hooks").is_err());
    }

    #[test]
    fn a_project_path_is_made_normal_once_and_serialises_as_the_text_it_was() {
        let path = ProjectPath::new("./data//train.csv").unwrap();
        assert_eq!(path, "data/train.csv");
        // Keys, run records and JSON hold the same string as before the type.
        assert_eq!(serde_json::to_string(&path).unwrap(), "\"data/train.csv\"");
        assert_eq!(
            serde_json::json!({ "path": path }),
            serde_json::json!({ "path": "data/train.csv" })
        );
        assert_eq!(ProjectPath::new("../x"), Err(PathProblem::EscapesRoot));
        assert_eq!(ProjectPath::new("a\0b"), Err(PathProblem::Nul));
        // What a stored result names is taken by the cache's rule only.
        assert_eq!(ProjectPath::stored("models/m.pt").unwrap(), "models/m.pt");
        assert!(ProjectPath::stored("a/./b").is_err());
        assert!(ProjectPath::stored(".git/config").is_err());
        assert!(ProjectPath::stored(".pipe/out/p/s/model").is_ok());
        // Looked up by its text in maps keyed by text.
        let mut map = std::collections::HashMap::new();
        map.insert(path.clone(), 1);
        assert_eq!(map.get("data/train.csv"), Some(&1));
    }

    #[test]
    fn a_path_read_with_serde_is_believed_only_as_far_as_the_stored_rule() {
        let read: ProjectPath = serde_json::from_str("\"models/m.pt\"").unwrap();
        assert_eq!(read, "models/m.pt");
        for hostile in HOSTILE {
            let text = serde_json::to_string(hostile).unwrap();
            let error = serde_json::from_str::<ProjectPath>(&text).expect_err(hostile);
            assert!(error.to_string().contains(hostile), "{hostile}: {error}");
            // As a map's key (an action's or a stage record's outputs),
            // the whole map is refused.
            let map = format!("{{\"models/m.pt\": 1, {text}: 2}}");
            assert!(
                serde_json::from_str::<BTreeMap<ProjectPath, u8>>(&map).is_err(),
                "{hostile}"
            );
        }
        // Written and read back, a map keyed by paths is what it was.
        let map: BTreeMap<ProjectPath, u8> =
            serde_json::from_str("{\"a/b\": 1, \".pipe/out/p/s/m\": 2}").unwrap();
        let written = serde_json::to_string(&map).unwrap();
        assert_eq!(written, "{\".pipe/out/p/s/m\":2,\"a/b\":1}");
    }

    #[test]
    fn a_list_read_dropping_refused_keeps_only_the_plain_paths() {
        #[derive(Deserialize)]
        struct Pages {
            #[serde(deserialize_with = "dropping_refused")]
            pages: Vec<ProjectPath>,
        }
        let mut written: Vec<&str> = HOSTILE.to_vec();
        written.insert(2, "out/report/index.html");
        let json = serde_json::json!({ "pages": written }).to_string();
        let read: Pages = serde_json::from_str(&json).unwrap();
        assert_eq!(read.pages, ["out/report/index.html"]);
    }
}
