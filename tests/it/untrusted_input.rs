//! The built-in data stages against hostile or mistaken input, through the
//! real `pipe` binary: records and downloads past their limits fail with
//! the place and the limit instead of exhausting memory or disk, params out
//! of range are refused before anything runs, at their place in the
//! pipeline, and messages quote only an excerpt of a huge value.

use std::path::Path;
use std::process::Command;

use pipe_test_support::http::{Reply, Server};
use pipe_test_support::{RunResult, TestProject};

/// One byte more than a record may hold (`MAX_RECORD_BYTES`, 64 MiB).
const OVER_RECORD_LIMIT: usize = (64 << 20) + 1;

/// The longest stderr a failed stage may print here: a message and a hint,
/// never the input itself.
const SHORT: usize = 4096;

fn pipe_validate(project: &TestProject) -> (i32, String) {
    let output = project.pipe(&["validate"]);
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn assert_failed_briefly(run: &RunResult, stage: &str) {
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.status(stage), "failed", "{}", run.stderr);
    assert!(
        run.stderr.len() < SHORT,
        "stderr quotes the input ({} bytes): {}…",
        run.stderr.len(),
        &run.stderr[..SHORT.min(run.stderr.len())]
    );
}

fn write_bytes(project: &TestProject, relative: &str, bytes: &[u8]) {
    std::fs::write(project.path(relative), bytes).expect("write input");
}

#[test]
fn a_csv_with_one_line_over_the_record_limit_fails_at_that_line() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  table:\n    uses: data/from-csv@1\n    with: { file: data.csv, text_column: text, label_column: label }\n",
    );
    // The header is fine; line 3 is one unterminated quoted field that
    // would otherwise be held whole.
    let mut data = b"text,label\nfine,1\n\"".to_vec();
    data.resize(data.len() + OVER_RECORD_LIMIT, b'x');
    write_bytes(&project, "data.csv", &data);
    drop(data);
    let run = project.run(&[]);
    assert_failed_briefly(&run, "table");
    assert!(
        run.stderr
            .contains("data.csv` line 3: the record starting here is larger than 64 MiB"),
        "{}",
        run.stderr
    );
    assert!(!project.exists(".pipe/out/pipe/table/dataset"));
}

#[test]
fn a_csv_header_of_one_huge_column_name_is_an_error_quoting_only_its_start() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  table:\n    uses: data/from-csv@1\n    with: { file: data.csv, text_column: text, label_column: label }\n",
    );
    // Under the record limit, so the header is read; the message lists the
    // columns, each cut to an excerpt.
    let mut data = vec![b'c'; 1 << 20];
    data.extend_from_slice(b"\nsome text\n");
    write_bytes(&project, "data.csv", &data);
    let run = project.run(&[]);
    assert_failed_briefly(&run, "table");
    assert!(
        run.stderr.contains("has no column `text`")
            && run
                .stderr
                .contains(&format!("`{}… (1048576 bytes)`", "c".repeat(80))),
        "{}",
        run.stderr
    );
}

#[test]
fn an_imdb_archive_with_a_review_over_the_record_limit_is_refused() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  reviews:\n    uses: imdb/extract@1\n    with: { archive: aclImdb_v1.tar.gz }\n",
    );
    // A review of zeros: the archive stays small, the review does not.
    let review_dir = project.path("src/aclImdb/train/pos");
    std::fs::create_dir_all(&review_dir).unwrap();
    let review = std::fs::File::create(review_dir.join("0_9.txt")).unwrap();
    review.set_len(OVER_RECORD_LIMIT as u64).unwrap();
    drop(review);
    let status = Command::new("tar")
        .arg("-czf")
        .arg(project.path("aclImdb_v1.tar.gz"))
        .arg("-C")
        .arg(project.path("src"))
        .arg("aclImdb")
        .status()
        .expect("tar");
    assert!(status.success());
    std::fs::remove_dir_all(project.path("src")).unwrap();
    assert!(
        std::fs::metadata(project.path("aclImdb_v1.tar.gz"))
            .unwrap()
            .len()
            < 1 << 20
    );
    let run = project.run(&[]);
    assert_failed_briefly(&run, "reviews");
    assert!(
        run.stderr.contains(&format!(
            "review `aclImdb/train/pos/0_9.txt` holds {OVER_RECORD_LIMIT} bytes, more than 64 MiB"
        )),
        "{}",
        run.stderr
    );
}

fn split_project(sizes: &str) -> TestProject {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        &format!(
            "stages:\n  split:\n    uses: data/split@1\n    with: {{ dataset: data.jsonl, seed: 1, {sizes} }}\n"
        ),
    );
    project.write(
        "data.jsonl",
        "{\"text\": \"a\", \"label\": 0}\n{\"text\": \"b\", \"label\": 1}\n{\"text\": \"c\", \"label\": 0}\n",
    );
    project
}

#[test]
fn split_counts_that_add_up_past_u64_are_an_error_not_a_panic() {
    let project = split_project("train: 9223372036854775807, val: 9223372036854775807, test: 2");
    let run = project.run(&[]);
    assert_failed_briefly(&run, "split");
    assert!(
        run.stderr.contains(
            "train 9223372036854775807 + val 9223372036854775807 + test 2 = 18446744073709551616 rows"
        ) && run.stderr.contains("has only 3"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
}

#[test]
fn split_sizes_that_are_all_zero_are_an_error_not_empty_files() {
    let project = split_project("train: 0, val: 0");
    // The catalog's rule finds it before anything runs, located.
    let run = project.run(&[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("every one of train, val, test is 0, so every part would be empty")
            && run.stderr.contains("pipe.yaml:4:")
            && run.stderr.len() < SHORT,
        "{}",
        run.stderr
    );
    assert!(!project.exists(".pipe/out/pipe/split/dataset"));
}

#[test]
fn a_negative_or_infinite_split_size_is_refused_at_its_place_before_running() {
    let project = split_project("train: 2, val: -1");
    let (code, stderr) = pipe_validate(&project);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("param `val` must be at least 0, not -1")
            && stderr.contains("pipe.yaml:4:"),
        "{stderr}"
    );

    let project = split_project("train: .inf");
    let (code, stderr) = pipe_validate(&project);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("param `train` must be a finite number, not `.inf`")
            && stderr.contains("pipe.yaml:4:"),
        "{stderr}"
    );
    let run = project.run(&[]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.ran().is_empty());
}

fn tokenize_project(max_length: &str) -> TestProject {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        &format!(
            "stages:\n  tokens:\n    uses: text/tokenize@1\n    with: {{ dataset: data.jsonl, tokenizer: tokenizer.json, max_length: {max_length} }}\n"
        ),
    );
    project.write(
        "data.jsonl",
        "{\"text\": \"a fine film\", \"label\": 1}\n{\"text\": \"a dull one\", \"label\": 0}\n",
    );
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("stages/tests/fixtures/tokenize/tokenizer.json");
    std::fs::copy(fixture, project.path("tokenizer.json")).unwrap();
    project
}

#[test]
fn max_length_below_one_is_refused_at_its_place_saying_what_fits() {
    for value in ["-5", "0"] {
        let project = tokenize_project(value);
        let (code, stderr) = pipe_validate(&project);
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains(&format!(
                "param `max_length` must be at least 1, not {value}"
            )) && stderr.contains("pipe.yaml:4:"),
            "{stderr}"
        );
    }
}

#[test]
fn a_tokenizer_whose_special_token_lies_outside_its_vocabulary_is_refused() {
    let project = tokenize_project("16");
    let mut tokenizer: serde_json::Value =
        serde_json::from_str(&project.read("tokenizer.json")).unwrap();
    tokenizer["post_processor"]["special_tokens"]["[CLS]"]["ids"] = serde_json::json!([40000]);
    project.write("tokenizer.json", &tokenizer.to_string());
    let run = project.run(&[]);
    assert_failed_briefly(&run, "tokens");
    assert!(
        run.stderr.contains(
            "special token `[CLS]` has id 40000, but the vocabulary has 30522 tokens (ids 0 to 30521)"
        ),
        "{}",
        run.stderr
    );
    assert!(!project.exists(".pipe/out/pipe/tokens/tokens"));
}

/// A server on 127.0.0.1 that answers every request with a body of `z`s
/// that never ends, until the client hangs up.
fn endless_server() -> String {
    Server::start(|_, _| Reply::endless(&[b'z'; 64 * 1024])).url("/endless.bin")
}

fn download_project(url: &str, limits: &str) -> TestProject {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        &format!(
            "stages:\n  get:\n    uses: data/download@1\n    with: {{ url: \"{url}\", sha256: \"{}\", retries: 0, {limits} }}\n",
            "0".repeat(64)
        ),
    );
    project
}

#[test]
fn an_endless_body_is_cut_off_past_max_bytes() {
    let url = endless_server();
    let project = download_project(&url, "max_bytes: 1000000");
    let run = project.run(&[]);
    assert_failed_briefly(&run, "get");
    assert!(
        run.stderr
            .contains("the body goes on past 1000000 bytes, more than `max_bytes` (1000000)"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_endless_body_is_cut_off_past_the_expected_size() {
    let url = endless_server();
    let project = download_project(&url, "size: 300000");
    let run = project.run(&[]);
    assert_failed_briefly(&run, "get");
    assert!(
        run.stderr
            .contains("the body goes on past 300000 bytes, more than `size` says (300000)"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_announced_size_over_the_limit_is_refused_before_downloading() {
    let project = TestProject::new();
    let mut files = std::collections::HashMap::new();
    files.insert("/big.bin".to_string(), vec![7u8; 5000]);
    let server = Server::serving(files);
    let project_yaml = |limits: &str| {
        format!(
            "stages:\n  get:\n    uses: data/download@1\n    with: {{ url: \"{}\", sha256: \"{}\", retries: 0, {limits} }}\n",
            server.url("/big.bin"),
            "0".repeat(64)
        )
    };
    project.write("pipe.yaml", &project_yaml("max_bytes: 4000"));
    let run = project.run(&[]);
    assert_failed_briefly(&run, "get");
    assert!(
        run.stderr
            .contains("the server announces 5000 bytes, more than `max_bytes` (4000)"),
        "{}",
        run.stderr
    );
    project.write("pipe.yaml", &project_yaml("size: 4999"));
    let run = project.run(&[]);
    assert_failed_briefly(&run, "get");
    assert!(
        run.stderr
            .contains("the server announces 5000 bytes, but `size` says 4999"),
        "{}",
        run.stderr
    );
    // One request per run: a refused size is not retried.
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn a_download_limit_below_one_byte_is_refused_at_its_place() {
    let project = download_project("http://127.0.0.1:9/x", "max_bytes: 0");
    let (code, stderr) = pipe_validate(&project);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("param `max_bytes` must be at least 1, not 0")
            && stderr.contains("pipe.yaml:4:"),
        "{stderr}"
    );
}
