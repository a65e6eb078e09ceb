//! `imdb/extract@1` through the real worker, on small archives shaped like
//! aclImdb_v1.tar.gz.

use crate::common;

use crate::common::{read_jsonl, Run};
use std::io::Read;
use std::path::Path;

use serde_json::{json, Value};

fn run_stage(dir: &Path, params: Value) -> Run {
    common::run_data_stage(dir, "imdb", "imdb/extract", params, None)
}

fn error_message(run: &Run) -> String {
    run.error()
}

/// (path in the archive, content)
type Entries = Vec<(String, Vec<u8>)>;

fn acl_imdb_entries() -> Entries {
    let text = |path: &str, content: &str| (path.to_string(), content.as_bytes().to_vec());
    vec![
        text("aclImdb/README", "Large Movie Review Dataset v1.0"),
        text("aclImdb/imdb.vocab", "the\nand\na\n"),
        text("aclImdb/imdbEr.txt", "0.1\n0.2\n"),
        text("aclImdb/train/labeledBow.feat", "9 0:9 1:1\n"),
        text(
            "aclImdb/train/urls_pos.txt",
            "http://www.imdb.com/title/tt0453418/usercomments\n",
        ),
        text(
            "aclImdb/train/pos/10_9.txt",
            "Great film.<br /><br />Loved it.",
        ),
        text("aclImdb/train/pos/2_7.txt", "Pretty good, \"really\"."),
        text("aclImdb/train/neg/5_1.txt", "Awful."),
        text("aclImdb/train/neg/0_3.txt", "Boring, too long."),
        text("aclImdb/train/unsup/0_0.txt", "No label here."),
        text("aclImdb/test/pos/3_10.txt", "Masterpiece."),
        text("aclImdb/test/neg/1_2.txt", "Not for me."),
        (
            "aclImdb/test/neg/7_4.txt".to_string(),
            b"Caf\xe9 scene was bad.".to_vec(),
        ),
    ]
}

fn write_archive(path: &Path, entries: &Entries) {
    let file = std::fs::File::create(path).unwrap();
    let encoder = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut builder = tar::Builder::new(encoder);
    for (name, content) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        builder
            .append_data(&mut header, name, content.as_slice())
            .unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap();
}

#[test]
fn extracts_labelled_reviews_sorted_by_split_label_and_id() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("aclImdb_v1.tar.gz");
    write_archive(&archive, &acl_imdb_entries());
    let run = run_stage(dir.path(), json!({ "archive": archive }));
    assert!(run.success, "{:?}", run.events);

    let records = read_jsonl(&run.output_dir.join("dataset"));
    let summary: Vec<(i64, &str, u64, u64)> = records
        .iter()
        .map(|record| {
            (
                record["label"].as_i64().unwrap(),
                record["split"].as_str().unwrap(),
                record["rating"].as_u64().unwrap(),
                record["id"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (0, "train", 3, 0),
            (0, "train", 1, 5),
            (1, "train", 7, 2),
            (1, "train", 9, 10),
            (0, "test", 2, 1),
            (0, "test", 4, 7),
            (1, "test", 10, 3),
        ]
    );
    assert_eq!(records[3]["text"], "Great film.<br /><br />Loved it.");
    assert_eq!(records[2]["text"], "Pretty good, \"really\".");
    assert_eq!(records[5]["text"], "Caf\u{fffd} scene was bad.");
    let keys: Vec<&String> = records[0].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["text", "label", "split", "rating", "id"]);

    let metrics: Value = serde_json::from_str(
        &std::fs::read_to_string(run.output_dir.join("metrics.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(metrics["rows"], 7);
    assert_eq!(metrics["train"]["pos"], 2);
    assert_eq!(metrics["train"]["neg"], 2);
    assert_eq!(metrics["test"]["pos"], 1);
    assert_eq!(metrics["test"]["neg"], 2);
    assert_eq!(metrics["invalid_utf8_files"], 1);
    assert!(metrics["train"].get("unsup").is_none());
}

#[test]
fn unsup_reviews_come_last_with_label_minus_one_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("aclImdb_v1.tar.gz");
    write_archive(&archive, &acl_imdb_entries());
    let run = run_stage(
        dir.path(),
        json!({ "archive": archive, "include_unsup": true }),
    );
    assert!(run.success, "{:?}", run.events);
    let records = read_jsonl(&run.output_dir.join("dataset"));
    assert_eq!(records.len(), 8);
    assert_eq!(records[4]["text"], "No label here.");
    assert_eq!(records[4]["label"], -1);
    assert_eq!(records[4]["split"], "train");
    assert_eq!(records[4]["rating"], 0);
}

#[test]
fn the_same_files_in_another_tar_order_give_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let entries = acl_imdb_entries();
    let mut reversed = entries.clone();
    reversed.reverse();
    let first = dir.path().join("first");
    let second = dir.path().join("second");
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    write_archive(&first.join("a.tar.gz"), &entries);
    write_archive(&second.join("a.tar.gz"), &reversed);
    let one = run_stage(&first, json!({ "archive": first.join("a.tar.gz") }));
    let two = run_stage(&second, json!({ "archive": second.join("a.tar.gz") }));
    assert!(one.success && two.success);
    let bytes_one = std::fs::read(one.output_dir.join("dataset")).unwrap();
    assert!(!bytes_one.is_empty());
    assert_eq!(
        bytes_one,
        std::fs::read(two.output_dir.join("dataset")).unwrap()
    );
}

/// `tar::Builder` refuses to write such names, so the header is filled in by hand.
fn append_raw(
    builder: &mut tar::Builder<impl std::io::Write>,
    name: &str,
    kind: tar::EntryType,
    link: &str,
    data: &[u8],
) {
    let mut header = tar::Header::new_old();
    header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    header.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
    header.set_entry_type(kind);
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    builder.append(&header, data).unwrap();
}

fn tampered_archive(path: &Path, name: &str, kind: tar::EntryType, link: &str) {
    let file = std::fs::File::create(path).unwrap();
    let encoder = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut builder = tar::Builder::new(encoder);
    let mut header = tar::Header::new_gnu();
    let content = b"Fine film.";
    header.set_size(content.len() as u64);
    builder
        .append_data(&mut header, "aclImdb/train/pos/1_8.txt", &content[..])
        .unwrap();
    let data: &[u8] = if kind == tar::EntryType::Regular {
        b"pwned"
    } else {
        b""
    };
    append_raw(&mut builder, name, kind, link, data);
    builder.into_inner().unwrap().finish().unwrap();
}

#[test]
fn an_entry_with_dot_dot_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("aclImdb_v1.tar.gz");
    tampered_archive(&archive, "aclImdb/../evil", tar::EntryType::Regular, "");
    let run = run_stage(dir.path(), json!({ "archive": archive }));
    assert!(!run.success);
    let message = error_message(&run);
    assert!(message.contains("aclImdb/../evil"), "{message}");
    assert!(message.contains("not the official"), "{message}");
    assert!(!run.output_dir.join("dataset").exists());
}

#[test]
fn an_absolute_entry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("aclImdb_v1.tar.gz");
    tampered_archive(&archive, "/etc/evil", tar::EntryType::Regular, "");
    let run = run_stage(dir.path(), json!({ "archive": archive }));
    assert!(!run.success);
    assert!(error_message(&run).contains("/etc/evil"));
}

#[test]
fn symbolic_and_hard_links_are_refused() {
    for (kind, word) in [
        (tar::EntryType::Symlink, "symbolic link"),
        (tar::EntryType::Link, "hard link"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("aclImdb_v1.tar.gz");
        tampered_archive(&archive, "aclImdb/train/neg/0_1.txt", kind, "/etc/passwd");
        let run = run_stage(dir.path(), json!({ "archive": archive }));
        assert!(!run.success);
        let message = error_message(&run);
        assert!(
            message.contains("aclImdb/train/neg/0_1.txt") && message.contains(word),
            "{message}"
        );
        assert!(!run.output_dir.join("dataset").exists());
    }
}

#[test]
fn a_file_that_is_not_an_archive_is_an_input_error() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("aclImdb_v1.tar.gz");
    let mut bytes = vec![0x1f, 0x8b];
    bytes.extend_from_slice(b"certainly not gzip data");
    std::fs::write(&archive, bytes).unwrap();
    let run = run_stage(dir.path(), json!({ "archive": archive }));
    assert!(!run.success);
    assert!(
        error_message(&run).contains("cannot read"),
        "{}",
        error_message(&run)
    );
}

#[test]
fn a_review_that_is_there_twice_is_refused_and_leaves_no_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("aclImdb_v1.tar.gz");
    let mut entries = acl_imdb_entries();
    // The same review again, under a path without the top folder.
    entries.push(("train/pos/2_8.txt".to_string(), b"Fine.".to_vec()));
    write_archive(&archive, &entries);
    let run = run_stage(dir.path(), json!({ "archive": archive }));
    assert!(!run.success);
    let message = error_message(&run);
    assert!(
        message.contains("holds review train/pos/2 twice") && message.contains("not the official"),
        "{message}"
    );
    assert!(!run.output_dir.join("dataset").exists());
}

#[test]
fn an_archive_without_reviews_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("other.tar.gz");
    write_archive(
        &archive,
        &vec![("data/readme.txt".to_string(), b"hello".to_vec())],
    );
    let run = run_stage(dir.path(), json!({ "archive": archive }));
    assert!(!run.success);
    assert!(error_message(&run).contains("no labelled reviews"));
}

/// A gzip-compressed tar of `count` reviews of `size` bytes of one letter
/// each, written as it is built (the test never holds a review either):
/// 20 of 60 MiB compress to about 1.2 MB.
fn write_bomb(path: &Path, count: u64, size: u64) {
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let encoder = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut builder = tar::Builder::new(encoder);
    for index in 0..count {
        let mut header = tar::Header::new_gnu();
        header.set_size(size);
        header.set_mode(0o644);
        builder
            .append_data(
                &mut header,
                format!("aclImdb/train/pos/{index}_9.txt"),
                std::io::repeat(b'a').take(size),
            )
            .unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap();
}

#[test]
fn an_archive_of_many_large_reviews_is_extracted_in_bounded_memory() {
    const REVIEWS: u64 = 20;
    const REVIEW_BYTES: u64 = 60 << 20;
    // One review (60 MiB, under the 64 MiB record limit) and its reading
    // buffers fit; 20 of them (1.2 GB) held at once do not.
    const PEAK_LIMIT: u64 = 400_000_000;
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("aclImdb_v1.tar.gz");
    write_bomb(&archive, REVIEWS, REVIEW_BYTES);
    let compressed = std::fs::metadata(&archive).unwrap().len();
    assert!(compressed < 4 << 20, "the bomb is {compressed} bytes");

    let invocation = pipe_test_support::worker::invocation(
        dir.path(),
        "imdb",
        "imdb/extract",
        json!({ "archive": archive }),
        None,
        1,
    );
    let (success, events, peak) = common::run_measuring_peak_rss(dir.path(), &invocation);
    assert!(success, "{events:?}");
    assert_eq!(events.last().unwrap()["event"], "done");

    // Every review arrived whole, in order, without reading the 1.2 GB back.
    let out = dir.path().join("out");
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["rows"], REVIEWS);
    assert_eq!(metrics["train"]["pos"], REVIEWS);
    let line_bytes = |id: u64| {
        let record = format!(r#"{{"text":"","label":1,"split":"train","rating":9,"id":{id}}}"#);
        record.len() as u64 + REVIEW_BYTES + 1
    };
    let dataset = out.join("dataset");
    assert_eq!(
        std::fs::metadata(&dataset).unwrap().len(),
        (0..REVIEWS).map(line_bytes).sum::<u64>()
    );
    let mut tail = String::new();
    let mut file = std::fs::File::open(&dataset).unwrap();
    std::io::Seek::seek(&mut file, std::io::SeekFrom::End(-70)).unwrap();
    file.read_to_string(&mut tail).unwrap();
    assert!(
        tail.ends_with(concat!(
            r#"aaa","label":1,"split":"train","rating":9,"id":19}"#,
            "\n"
        )),
        "{tail}"
    );

    assert!(
        peak < PEAK_LIMIT,
        "the worker peaked at {} MB of resident memory extracting {compressed} bytes",
        peak / 1_000_000
    );
    eprintln!(
        "imdb/extract of {REVIEWS} reviews of {} MiB ({compressed} bytes compressed): peak RSS {} MB",
        REVIEW_BYTES >> 20,
        peak / 1_000_000
    );
}
