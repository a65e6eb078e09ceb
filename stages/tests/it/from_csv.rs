//! `data/from-csv@1` through the real worker, on small tables written by
//! the tests (plain, gzip and bzip2).

use crate::common;

use crate::common::Run;
use std::io::Write;
use std::path::Path;

use serde_json::{json, Value};

/// Readers of this stage's outputs.
trait DatasetOutput {
    fn records(&self) -> Vec<Value>;
}

impl DatasetOutput for Run {
    fn records(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.output_dir.join("dataset")).unwrap();
        text.lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

fn run_stage(dir: &Path, params: Value) -> Run {
    common::run_data_stage(dir, "reviews", "data/from-csv", params, None)
}

/// Shaped like the Rotten Tomatoes corpus: `plot` rows have no label.
const ROTTEN: &str = "category,text,movie_name,has_plot_and_reviews\n\
plot,\"A bank manager, fired, plans a heist.\",aankhen,False\n\
fresh,\"Smart, funny\nand \"\"warm\"\".\",aankhen,True\n\
rotten,Dull.,gigli,True\n\
fresh,Loved it.,up,True\n\
rotten,  ,gigli,True\n";

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn bzip2(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

#[test]
fn csv_with_a_label_mapping_drops_unmapped_rows_and_keeps_quoted_fields() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rotten.csv");
    std::fs::write(&file, ROTTEN).unwrap();
    let run = run_stage(
        dir.path(),
        json!({
            "file": file,
            "text_column": "text",
            "label_column": "category",
            "labels": {"fresh": 1, "rotten": 0},
            "keep_columns": ["movie_name"],
        }),
    );
    assert!(run.success, "{:?}", run.events);
    assert_eq!(
        run.records(),
        vec![
            json!({"text": "Smart, funny\nand \"warm\".", "label": 1, "movie_name": "aankhen"}),
            json!({"text": "Dull.", "label": 0, "movie_name": "gigli"}),
            json!({"text": "Loved it.", "label": 1, "movie_name": "up"}),
        ]
    );
    let metrics = run.metrics();
    assert_eq!(metrics["rows_read"], 5);
    assert_eq!(metrics["rows_kept"], 3);
    assert_eq!(metrics["dropped"]["label_not_in_labels"], 1);
    assert_eq!(metrics["dropped"]["empty_text"], 1);
    assert_eq!(metrics["labels"]["1"], 2);
    assert_eq!(metrics["labels"]["0"], 1);
    let messages: Vec<&str> = run
        .events
        .iter()
        .filter_map(|event| event["text"].as_str())
        .collect();
    assert!(
        messages.iter().any(|text| text.contains("`plot` (1)")),
        "{messages:?}"
    );
}

#[test]
fn bzip2_csv_with_a_filter_and_a_label_list() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rotten_tomatoes_corpus_full.csv.bz2");
    std::fs::write(&file, bzip2(ROTTEN.as_bytes())).unwrap();
    let run = run_stage(
        dir.path(),
        json!({
            "file": file,
            "text_column": "text",
            "label_column": "category",
            "labels": ["rotten", "fresh"],
            "filter": {"movie_name": ["aankhen", "up"]},
        }),
    );
    assert!(run.success, "{:?}", run.events);
    let texts: Vec<(String, i64)> = run
        .records()
        .iter()
        .map(|record| {
            (
                record["text"].as_str().unwrap().to_string(),
                record["label"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        texts,
        vec![
            ("Smart, funny\nand \"warm\".".to_string(), 1),
            ("Loved it.".to_string(), 1)
        ]
    );
    assert_eq!(run.metrics()["dropped"]["filtered"], 2);
}

#[test]
fn gzipped_tsv_with_integer_labels_uses_tabs_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("reviews.tsv.gz");
    let table = "id\tsentence\tlabel\n1\tgood, really good\t1\n2\tbad\t0\n3\t\"quoted\ttab\"\t1\n";
    std::fs::write(&file, gzip(table.as_bytes())).unwrap();
    let run = run_stage(
        dir.path(),
        json!({"file": file, "text_column": "sentence", "label_column": "label", "keep_columns": ["id"]}),
    );
    assert!(run.success, "{:?}", run.events);
    assert_eq!(
        run.records(),
        vec![
            json!({"text": "good, really good", "label": 1, "id": "1"}),
            json!({"text": "bad", "label": 0, "id": "2"}),
            json!({"text": "quoted\ttab", "label": 1, "id": "3"}),
        ]
    );
}

#[test]
fn compression_is_detected_from_the_bytes_when_the_name_does_not_say() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("export.csv");
    std::fs::write(&file, gzip(b"\xef\xbb\xbftext,label\nfine,1\n")).unwrap();
    let run = run_stage(
        dir.path(),
        json!({"file": file, "text_column": "text", "label_column": "label"}),
    );
    assert!(run.success, "{:?}", run.events);
    assert_eq!(run.records(), vec![json!({"text": "fine", "label": 1})]);
}

#[test]
fn without_a_header_columns_are_named_by_position() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain.csv");
    std::fs::write(&file, "pos;nice\nneg;meh\n").unwrap();
    let run = run_stage(
        dir.path(),
        json!({
            "file": file, "has_header": false, "delimiter": ";",
            "text_column": "1", "label_column": "0", "labels": {"pos": 1, "neg": 0},
        }),
    );
    assert!(run.success, "{:?}", run.events);
    assert_eq!(
        run.records(),
        vec![
            json!({"text": "nice", "label": 1}),
            json!({"text": "meh", "label": 0})
        ]
    );
}

#[test]
fn a_missing_column_lists_the_columns_and_suggests_the_closest() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rotten.csv");
    std::fs::write(&file, ROTTEN).unwrap();
    let run = run_stage(
        dir.path(),
        json!({"file": file, "text_column": "text", "label_column": "Categroy", "labels": {"fresh": 1}}),
    );
    let error = run.error();
    assert!(error.contains("no column `Categroy`"), "{error}");
    assert!(
        error.contains("`category`, `text`, `movie_name`, `has_plot_and_reviews`"),
        "{error}"
    );
    assert!(error.contains("did you mean `category`?"), "{error}");
    assert!(!run.output_dir.join("dataset").exists() || run.records().is_empty());
}

#[test]
fn a_row_with_too_many_fields_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.csv");
    std::fs::write(
        &file,
        "text,label\n\"multi\nline\",1\nok,0\nan unquoted, comma,1\n",
    )
    .unwrap();
    let run = run_stage(
        dir.path(),
        json!({"file": file, "text_column": "text", "label_column": "label"}),
    );
    let error = run.error();
    assert!(error.contains("line 5"), "{error}");
    assert!(error.contains("has 3 fields"), "{error}");
}

#[test]
fn a_label_that_is_not_an_integer_without_a_mapping_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rotten.csv");
    std::fs::write(&file, ROTTEN).unwrap();
    let run = run_stage(
        dir.path(),
        json!({"file": file, "text_column": "text", "label_column": "category"}),
    );
    let error = run.error();
    assert!(
        error.contains("line 2") && error.contains("`plot`"),
        "{error}"
    );
    assert!(error.contains("labels:"), "{error}");
}

#[test]
fn a_mapping_that_keeps_nothing_says_which_values_were_seen() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rotten.csv");
    std::fs::write(&file, ROTTEN).unwrap();
    let run = run_stage(
        dir.path(),
        json!({"file": file, "text_column": "text", "label_column": "category", "labels": {"Fresh": 1}}),
    );
    let error = run.error();
    assert!(
        error.contains("no row") && error.contains("`fresh` (2)"),
        "{error}"
    );
}

#[test]
fn a_truncated_bzip2_file_is_an_input_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rotten.csv.bz2");
    let compressed = bzip2(ROTTEN.repeat(50).as_bytes());
    std::fs::write(&file, &compressed[..compressed.len() / 2]).unwrap();
    let run = run_stage(
        dir.path(),
        json!({"file": file, "text_column": "text", "label_column": "category", "labels": {"fresh": 1}}),
    );
    assert!(run.error().contains("cannot read"), "{}", run.error());
}

#[test]
fn millions_of_distinct_unmapped_labels_are_counted_in_bounded_memory() {
    // An id column taken for the label: every row's value is new. Each
    // value of 80 characters was kept until the end of the run.
    const ROWS: u64 = 1_500_000;
    const PEAK_LIMIT: u64 = 60_000_000;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ids.csv.gz");
    let mut encoder = flate2::write::GzEncoder::new(
        std::io::BufWriter::new(std::fs::File::create(&file).unwrap()),
        flate2::Compression::default(),
    );
    let mut rows = String::from("text,label\n");
    for row in 0..ROWS {
        rows.push_str(&format!("some text,{row:v>80}\n"));
        if rows.len() > 1 << 20 || row + 1 == ROWS {
            encoder.write_all(rows.as_bytes()).unwrap();
            rows.clear();
        }
    }
    encoder.finish().unwrap().flush().unwrap();
    let invocation = pipe_test_support::worker::invocation(
        dir.path(),
        "reviews",
        "data/from-csv",
        json!({
            "file": file,
            "text_column": "text",
            "label_column": "label",
            "labels": { "pos": 1 },
        }),
        None,
        1,
    );
    let (success, events, peak) = common::run_measuring_peak_rss(dir.path(), &invocation);
    assert!(!success);
    assert!(
        peak < PEAK_LIMIT,
        "the worker peaked at {} MB of resident memory",
        peak / 1_000_000
    );
    let hint = events.last().unwrap()["hint"].as_str().unwrap().to_string();
    assert!(
        hint.contains(&format!("{ROWS} rows whose `label` is not in `labels`"))
            && hint
                .contains("and more than 9995 more values (counted one by one: the first 10000)"),
        "{hint}"
    );
}
