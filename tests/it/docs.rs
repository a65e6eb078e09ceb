//! The tests the docs name exist. A doc names a test as `PATH.rs::NAME` in
//! backquotes, PATH from the repository root (docs/ARCHITECTURE.md,
//! "Promises"), so a test renamed, moved or deleted fails here instead of
//! leaving a promise that nothing checks. A long snake_case name in
//! backquotes without a path is taken for a test too: it must be written
//! with its file, or be a name the code has (a field, a function).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A name in backquotes with this many words or more is taken for a test.
/// Shorter ones are params, metrics and functions (`bytes_per_second`).
const TEST_NAME_WORDS: usize = 5;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// README.md and every Markdown file under docs/.
fn documents() -> Vec<PathBuf> {
    let mut documents = vec![root().join("README.md")];
    files_under(&root().join("docs"), &mut documents);
    documents.retain(|path| path.extension().is_some_and(|extension| extension == "md"));
    documents.sort();
    documents
}

/// Every file under `dir`, leaving out build outputs and hidden folders
/// (`.git`, `.venv`, a project's `.pipe`).
fn files_under(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|error| panic!("{}: {error}", dir.display()));
    for entry in entries {
        let entry = entry.unwrap();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        let file_type = entry.file_type().unwrap();
        if file_type.is_dir() {
            files_under(&entry.path(), files);
        } else if file_type.is_file() {
            files.push(entry.path());
        }
    }
}

/// The inline code spans of a Markdown text, each with the line it starts
/// on, leaving out fenced code blocks. A span is closed by a run of as many
/// backquotes as opened it (`` ` `` holds one), within its paragraph.
fn code_spans(markdown: &str) -> Vec<(usize, String)> {
    let mut text = String::with_capacity(markdown.len());
    let mut fenced = false;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
        } else if !fenced {
            text.push_str(line);
        }
        text.push('\n');
    }
    let bytes = text.as_bytes();
    let run_at = |at: usize| bytes[at..].iter().take_while(|byte| **byte == b'`').count();
    let mut spans = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] != b'`' {
            at += 1;
            continue;
        }
        let opening = run_at(at);
        let start = at + opening;
        let mut look = start;
        let mut end = None;
        while look < bytes.len() {
            if bytes[look] == b'`' {
                let closing = run_at(look);
                if closing == opening {
                    end = Some(look);
                    break;
                }
                look += closing;
            } else {
                look += 1;
            }
        }
        match end {
            Some(end) if !text[start..end].contains("\n\n") => {
                let line = text[..at].matches('\n').count() + 1;
                spans.push((line, text[start..end].trim().to_string()));
                at = end + opening;
            }
            _ => at = start,
        }
    }
    spans
}

/// `(path, name)` when a span cites a test: `tests/it/x.rs::name`.
fn citation(span: &str) -> Option<(&str, &str)> {
    let (path, name) = span.split_once("::")?;
    let is_path = path.ends_with(".rs")
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c));
    (is_path && is_snake_case(name)).then_some((path, name))
}

fn is_snake_case(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The last segment of a span that looks like a test named without its
/// file (`a_long_name`, `module::a_long_name`).
fn bare_test_name(span: &str) -> Option<&str> {
    let name = span.rsplit("::").next()?;
    let is_identifier = span.split("::").all(is_snake_case);
    let is_long = name.split('_').filter(|word| !word.is_empty()).count() >= TEST_NAME_WORDS;
    (is_identifier && is_long).then_some(name)
}

/// The functions of a Rust source that `#[test]` marks (in a `proptest!`
/// block too), by name.
fn tests_in(source: &str) -> BTreeSet<String> {
    let lines: Vec<&str> = source.lines().map(str::trim).collect();
    let mut tests = BTreeSet::new();
    for (index, line) in lines.iter().enumerate() {
        let Some(rest) = line.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let marked = lines[..index]
            .iter()
            .rev()
            .take_while(|above| above.starts_with("#[") || above.starts_with("//"))
            .any(|above| *above == "#[test]");
        if marked {
            tests.insert(name);
        }
    }
    tests
}

/// Every test of the repository: its name and the files that hold one so
/// named.
fn every_test() -> BTreeMap<String, Vec<String>> {
    let mut files = Vec::new();
    files_under(root(), &mut files);
    let mut tests: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in files {
        if file.extension().is_some_and(|extension| extension == "rs") {
            let relative = file.strip_prefix(root()).unwrap().display().to_string();
            for name in tests_in(&read(&file)) {
                tests.entry(name).or_default().push(relative.clone());
            }
        }
    }
    tests
}

/// Every identifier in the repository's code, configuration and fixtures.
fn every_identifier() -> BTreeSet<String> {
    const CODE: &[&str] = &[
        "rs", "toml", "json", "yaml", "yml", "py", "sh", "cpp", "h", "c",
    ];
    let mut files = Vec::new();
    files_under(root(), &mut files);
    let mut identifiers = BTreeSet::new();
    for file in files {
        let is_code = file
            .extension()
            .is_some_and(|extension| CODE.iter().any(|code| extension == *code));
        // A fixture that is not text has no names to give.
        let Some(text) = is_code.then(|| fs::read_to_string(&file).ok()).flatten() else {
            continue;
        };
        identifiers.extend(
            text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| word.contains('_'))
                .map(str::to_string),
        );
    }
    identifiers
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root()).unwrap().display().to_string()
}

#[test]
fn every_test_a_doc_names_is_a_test_in_the_file_it_names() {
    let mut cited = 0;
    let mut wrong = Vec::new();
    for document in documents() {
        for (line, span) in code_spans(&read(&document)) {
            let Some((path, name)) = citation(&span) else {
                continue;
            };
            cited += 1;
            let file = root().join(path);
            let place = format!("{}:{line}: `{span}`", relative(&document));
            if !file.is_file() {
                wrong.push(format!("{place}: no file {path}"));
            } else if !tests_in(&read(&file)).contains(name) {
                wrong.push(format!("{place}: {path} has no test `{name}`"));
            }
        }
    }
    assert!(
        cited >= 50,
        "only {cited} tests cited: are they still written `PATH.rs::NAME`?"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_test_a_doc_names_comes_with_its_file_and_a_long_name_without_one_is_in_the_code() {
    let tests = every_test();
    let identifiers = every_identifier();
    let mut wrong = Vec::new();
    for document in documents() {
        for (line, span) in code_spans(&read(&document)) {
            let Some(name) = bare_test_name(&span) else {
                continue;
            };
            let place = format!("{}:{line}: `{span}`", relative(&document));
            if let Some(files) = tests.get(name) {
                let cited: Vec<String> = files
                    .iter()
                    .map(|file| format!("`{file}::{name}`"))
                    .collect();
                wrong.push(format!(
                    "{place}: write the test with its file: {}",
                    cited.join(" or ")
                ));
            } else if !identifiers.contains(name) {
                wrong.push(format!(
                    "{place}: no test and nothing in the code has this name"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_promise_in_the_architecture_names_a_test_that_checks_it() {
    let architecture = read(&root().join("docs/ARCHITECTURE.md"));
    let section = architecture
        .split("\n## ")
        .find(|section| section.starts_with("Promises"))
        .expect("docs/ARCHITECTURE.md has a `## Promises` section");
    let mut promises: Vec<String> = Vec::new();
    let mut in_promise = false;
    for line in section.lines().skip(1) {
        if let Some(first) = line.strip_prefix("- ") {
            promises.push(first.to_string());
            in_promise = true;
        } else if line.starts_with("  ") && in_promise {
            let promise = promises.last_mut().unwrap();
            promise.push('\n');
            promise.push_str(line);
        } else {
            in_promise = false;
        }
    }
    assert!(
        promises.len() >= 20,
        "only {} promises found: is each still a `- ` bullet under `## Promises`?",
        promises.len()
    );
    let unchecked: Vec<&str> = promises
        .iter()
        .filter(|promise| {
            !code_spans(promise)
                .iter()
                .any(|(_, span)| citation(span).is_some())
        })
        .map(|promise| promise.lines().next().unwrap())
        .collect();
    assert!(
        unchecked.is_empty(),
        "promises that name no test as `PATH.rs::NAME`:\n{}",
        unchecked.join("\n")
    );
}

/// The top-level modules of the engine: its files and folders under
/// engine/src/, the crate root and test files left out.
fn engine_modules() -> BTreeSet<String> {
    let dir = root().join("engine/src");
    let entries = fs::read_dir(&dir).unwrap_or_else(|error| panic!("{}: {error}", dir.display()));
    let mut modules = BTreeSet::new();
    for entry in entries {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let module = if entry.file_type().unwrap().is_dir() {
            name
        } else if let Some(stem) = name.strip_suffix(".rs") {
            stem.to_string()
        } else {
            continue;
        };
        if module != "lib" && module != "tests" && !module.ends_with("_tests") {
            modules.insert(module);
        }
    }
    modules
}

#[test]
fn the_architecture_layer_list_names_every_module_of_the_engine() {
    let architecture = read(&root().join("docs/ARCHITECTURE.md"));
    let layering = architecture
        .split_once("**Layering.**")
        .and_then(|(_, rest)| rest.split_once("**Invariant:**"))
        .map(|(layering, _)| layering)
        .expect("docs/ARCHITECTURE.md has a `**Layering.**` paragraph before an `**Invariant:**`");
    let named: BTreeSet<String> = code_spans(layering)
        .into_iter()
        .map(|(_, span)| span.trim_end_matches('/').to_string())
        .collect();
    let modules = engine_modules();
    assert!(
        modules.len() >= 30,
        "only {} modules found under engine/src",
        modules.len()
    );
    let missing: Vec<&String> = modules.difference(&named).collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md, \"Layering\", does not name these modules of engine/src: {missing:?}; \
         put each in its band (`python3 scripts/check-import-circles.py --layers engine/src`)"
    );
}
