//! The YAML test suite (engine/tests/fixtures/yaml-suite/, its README says
//! which release and why every case is there), through pipe's YAML layer:
//! the parser's events are the suite's, a valid case's document is its
//! `in.json` with scalars resolved by the core schema, and an invalid one
//! is refused with an error located in its file. A valid case pipe refuses
//! on purpose is listed below with its reason and must be refused with
//! that diagnostic, never read some other way. No case panics.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use pipe_engine::{read_yaml, Diagnostic, YamlReading};
use proptest::prelude::*;
use serde_json::Value;

/// A file holds one document.
const DOCUMENTS: &str = "multiple-documents";
/// A tag changes what a value is (`!!str 12`, `!local x`); pipe reads
/// none, so it refuses one rather than read the value some other way.
const TAG: &str = "yaml-tag";
/// Keys are strings: not empty (`: a`), a list or a mapping.
const KEY: &str = "non-string-key";

/// The valid cases pipe refuses on purpose, each with every code it is
/// refused with. The suite holds no valid case with a duplicate key (YAML
/// forbids them) or over pipe's limits.
const REFUSED: &[(&str, &[&str])] = &[
    ("2AUY", &[TAG]),
    ("2JQS", &[KEY]),
    ("2XXW", &[TAG]),
    ("33X3", &[TAG]),
    ("35KP", &[DOCUMENTS, TAG]),
    ("4FJ6", &[KEY]),
    ("52DL", &[TAG]),
    ("565N", &[TAG]),
    ("57H4", &[TAG]),
    ("5TYM", &[DOCUMENTS, TAG]),
    ("6BFJ", &[KEY]),
    ("6CK3", &[TAG]),
    ("6JWB", &[TAG]),
    ("6M2F", &[KEY]),
    ("6PBE", &[KEY]),
    ("6WLZ", &[DOCUMENTS, TAG]),
    ("6XDY", &[DOCUMENTS]),
    ("6ZKB", &[DOCUMENTS]),
    ("735Y", &[TAG]),
    ("74H7", &[TAG]),
    ("7FWL", &[TAG]),
    ("7Z25", &[DOCUMENTS]),
    ("8MK2", &[TAG]),
    ("9DXL", &[DOCUMENTS]),
    ("9KAX", &[DOCUMENTS, TAG]),
    ("9MMW", &[KEY]),
    ("9WXW", &[DOCUMENTS, TAG]),
    ("BU8L", &[TAG]),
    ("C4HZ", &[TAG]),
    ("CC74", &[TAG]),
    ("CFD4", &[KEY]),
    ("CUP7", &[TAG]),
    ("DFF7", &[KEY]),
    ("EHF6", &[TAG]),
    ("F2C7", &[TAG]),
    ("FH7J", &[TAG, KEY]),
    ("FRK4", &[KEY]),
    ("HMQ5", &[TAG]),
    ("J7PZ", &[TAG]),
    ("JHB9", &[DOCUMENTS]),
    ("KK5P", &[KEY]),
    ("KSS4", &[DOCUMENTS]),
    ("L383", &[DOCUMENTS]),
    ("L94M", &[TAG]),
    ("LE5A", &[TAG]),
    ("LX3P", &[KEY]),
    ("M2N8/00", &[KEY]),
    ("M2N8/01", &[KEY]),
    ("M5C3", &[TAG]),
    ("M5DY", &[KEY]),
    ("M7A3", &[DOCUMENTS]),
    ("NHX8", &[KEY]),
    ("NKF9", &[DOCUMENTS, KEY]),
    ("P76L", &[TAG]),
    ("PUW8", &[DOCUMENTS]),
    ("PW8X", &[KEY]),
    ("Q9WF", &[KEY]),
    ("RZP5", &[KEY]),
    ("RZT7", &[DOCUMENTS]),
    ("S3PD", &[KEY]),
    ("S4JQ", &[TAG]),
    ("SBG9", &[KEY]),
    ("SM9W/01", &[KEY]),
    ("U3C3", &[TAG]),
    ("U9NS", &[DOCUMENTS]),
    ("UGM3", &[TAG]),
    ("UKK6/00", &[KEY]),
    ("UKK6/02", &[TAG]),
    ("UT92", &[DOCUMENTS]),
    ("V9D5", &[KEY]),
    ("W4TN", &[DOCUMENTS]),
    ("WZ62", &[TAG, KEY]),
    ("X38W", &[KEY]),
    ("XW4D", &[KEY]),
    ("Z67P", &[TAG]),
    ("Z9M4", &[TAG]),
];

fn refused_on_purpose(id: &str) -> Option<&'static [&'static str]> {
    REFUSED
        .iter()
        .find(|(refused, _)| *refused == id)
        .map(|(_, codes)| *codes)
}

#[derive(Clone)]
struct Case {
    /// `229Q`, or `2G84/00` for a variant.
    id: String,
    dir: PathBuf,
    name: String,
    yaml: String,
    events: Vec<String>,
    json: Option<String>,
    invalid: bool,
}

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/yaml-suite")
}

fn cases() -> Vec<Case> {
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(suite_dir()).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        if dir.join("in.yaml").exists() {
            dirs.push(dir);
        } else {
            for variant in std::fs::read_dir(&dir).unwrap() {
                dirs.push(variant.unwrap().path());
            }
        }
    }
    dirs.sort();
    let read = |dir: &Path, name: &str| std::fs::read_to_string(dir.join(name)).ok();
    dirs.into_iter()
        .map(|dir| Case {
            id: dir
                .strip_prefix(suite_dir())
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/"),
            name: read(&dir, "===").unwrap_or_default().trim().to_string(),
            yaml: read(&dir, "in.yaml").expect("in.yaml"),
            events: read(&dir, "test.event")
                .expect("test.event")
                .lines()
                .map(str::to_string)
                .collect(),
            json: read(&dir, "in.json"),
            invalid: dir.join("error").exists(),
            dir,
        })
        .collect()
}

/// Numbers compare by value: JSON has no integer type of its own, so
/// `1000` and `1e3` are one number.
fn same_json(ours: &Value, theirs: &Value) -> bool {
    match (ours, theirs) {
        (Value::Number(a), Value::Number(b)) => a == b || a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_json(a, b))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(key, a)| b.get(key).is_some_and(|b| same_json(a, b)))
        }
        _ => ours == theirs,
    }
}

/// What is wrong with a located diagnostic about `case`, if anything: it
/// must point at a line and column that exist in the file.
fn badly_located(case: &Case, diagnostic: &Diagnostic) -> Option<String> {
    let Some(location) = &diagnostic.location else {
        return Some(format!("`{}` has no location", diagnostic.message));
    };
    let lines: Vec<&str> = case.yaml.split('\n').collect();
    let within = location.line >= 1
        && lines.get(location.line - 1).is_some_and(|line| {
            location.col >= 1 && location.col <= line.trim_end_matches('\r').chars().count() + 1
        });
    (!within || *location.file != *case.dir.join("in.yaml")).then(|| {
        format!(
            "`{}` is located at {}:{}:{}, not within the file",
            diagnostic.message,
            location.file.display(),
            location.line,
            location.col
        )
    })
}

/// What is wrong with what pipe made of `case`, if anything.
fn problem(case: &Case, reading: &YamlReading) -> Option<String> {
    if case.invalid {
        return match &reading.document {
            Ok(_) => Some("invalid YAML was read without an error".to_string()),
            Err(diagnostics) => diagnostics
                .iter()
                .find_map(|diagnostic| badly_located(case, diagnostic)),
        };
    }
    if reading.events != case.events {
        return Some(format!(
            "events differ:\n  ours:   {}\n  theirs: {}",
            reading.events.join(" "),
            case.events.join(" ")
        ));
    }
    match (&reading.document, refused_on_purpose(&case.id)) {
        (Ok(_), Some(codes)) => Some(format!("read, but pipe should refuse it ({codes:?})")),
        (Err(diagnostics), Some(codes)) => {
            let mut found: Vec<&str> = diagnostics
                .iter()
                .map(|diagnostic| diagnostic.code)
                .collect();
            found.sort_unstable();
            found.dedup();
            let mut expected = codes.to_vec();
            expected.sort_unstable();
            diagnostics
                .iter()
                .find_map(|diagnostic| badly_located(case, diagnostic))
                .or_else(|| {
                    (found != expected).then(|| {
                        format!("refused with {found:?}, not {expected:?}: {diagnostics:?}")
                    })
                })
        }
        (Err(diagnostics), None) => Some(format!("refused: {diagnostics:?}")),
        (Ok(document), None) => {
            let json = case.json.as_deref()?;
            let theirs: Vec<Value> = serde_json::Deserializer::from_str(json)
                .into_iter()
                .collect::<Result<_, _>>()
                .expect("in.json");
            let same = match (document, theirs.as_slice()) {
                (None, []) => true,
                (Some(ours), [theirs]) => same_json(ours, theirs),
                _ => false,
            };
            (!same).then(|| format!("document differs:\n  ours:   {document:?}\n  theirs: {json}"))
        }
    }
}

#[test]
fn every_case_of_the_yaml_test_suite_is_read_as_yaml_1_2_says_or_refused_with_a_located_error() {
    let cases = cases();
    let valid = cases.iter().filter(|case| !case.invalid).count();
    assert_eq!(
        (cases.len(), valid),
        (402, 308),
        "the suite's release has 402 cases, 308 valid"
    );

    let mut failures = Vec::new();
    for case in &cases {
        let read = catch_unwind(AssertUnwindSafe(|| {
            read_yaml(&case.dir.join("in.yaml"), case.yaml.clone())
        }));
        let found = match read {
            Err(_) => Some("panicked".to_string()),
            Ok(reading) => problem(case, &reading),
        };
        if let Some(found) = found {
            failures.push(format!("{} ({}): {found}", case.id, case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn each_case_pipe_refuses_on_purpose_is_a_valid_case_of_the_suite_listed_once() {
    let cases = cases();
    for (index, (id, codes)) in REFUSED.iter().enumerate() {
        assert!(
            cases.iter().any(|case| case.id == *id && !case.invalid),
            "{id} is not a valid case of the suite"
        );
        assert!(!codes.is_empty(), "{id}: no reason given");
        assert!(
            REFUSED[..index].iter().all(|(earlier, _)| earlier != id),
            "{id} is listed twice"
        );
    }
}

/// What YAML's own syntax is made of, anchors and tags included: the
/// edits that reach the corners of the parser and of the layer's reading
/// of a node's properties.
const FRAGMENTS: [&str; 20] = [
    ":", " ", "\n", "\t", "- ", "? ", "[", "]", "{", "}", ",", "&a ", "*a", "!t ", "!!str ", "#",
    "\"", "'", "|", ">",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Each case, valid or not, with random edits: read without a panic,
    /// or refused with every error located within the edited file.
    #[test]
    fn edited_suite_cases_never_panic_and_every_refusal_is_located_in_the_file(
        case in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0..FRAGMENTS.len(), any::<bool>()), 1..6),
    ) {
        static CASES: OnceLock<Vec<Case>> = OnceLock::new();
        let cases = CASES.get_or_init(cases);
        let case = &cases[case.index(cases.len())];
        let mut chars: Vec<char> = case.yaml.chars().collect();
        for (at, fragment, insert) in &edits {
            let at = at.index(chars.len() + 1);
            if *insert {
                chars.splice(at..at, FRAGMENTS[*fragment].chars());
            } else {
                chars.drain(at..(at + 3).min(chars.len()));
            }
        }
        let edited = Case { yaml: chars.into_iter().collect(), ..case.clone() };
        let reading = read_yaml(&edited.dir.join("in.yaml"), edited.yaml.clone());
        if let Err(diagnostics) = &reading.document {
            for diagnostic in diagnostics {
                prop_assert_eq!(badly_located(&edited, diagnostic), None, "in {:?}", edited.yaml);
            }
        }
    }
}
