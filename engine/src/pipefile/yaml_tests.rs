use std::path::Path;

use serde_json::json;

use super::yaml_reading::read_yaml;
use crate::project_files::source::Sources;
use crate::project_files::yaml::{parse, Node};

fn document(text: &str) -> serde_json::Value {
    read_yaml(Path::new("pipe.yaml"), text.to_string())
        .document
        .unwrap_or_else(|diagnostics| panic!("{text:?} refused: {diagnostics:?}"))
        .unwrap_or_else(|| panic!("{text:?} holds no document"))
}

fn root(text: &str) -> Node {
    let mut sources = Sources::default();
    let file = sources.add(Some("pipe.yaml".into()), text.to_string());
    parse(&sources, file).unwrap().unwrap()
}

#[test]
fn a_single_pair_mapping_inside_a_flow_list_is_a_mapping() {
    assert_eq!(
        document("x: [a: {b: c}]"),
        json!({"x": [{"a": {"b": "c"}}]})
    );
    assert_eq!(
        document("metrics: [eval/metrics.json: {cache: false}]\n"),
        json!({"metrics": [{"eval/metrics.json": {"cache": false}}]})
    );
    assert_eq!(document("x: [a: [b]]"), json!({"x": [{"a": ["b"]}]}));
    assert_eq!(
        document("outs: [a.bin, model.pt: {cache: false}, b]\n"),
        json!({"outs": ["a.bin", {"model.pt": {"cache": false}}, "b"]})
    );
}

#[test]
fn a_single_pair_mapping_inside_a_flow_list_gives_the_events_yaml_says() {
    let reading = read_yaml(Path::new("pipe.yaml"), "x: [a: {b: c}]\n".into());
    assert_eq!(
        reading.events,
        [
            "+STR", "+DOC", "+MAP", "=VAL :x", "+SEQ []", "+MAP {}", "=VAL :a", "+MAP {}",
            "=VAL :b", "=VAL :c", "-MAP", "-MAP", "-SEQ", "-MAP", "-DOC", "-STR",
        ]
    );
}

#[test]
fn a_node_with_an_anchor_is_located_at_its_own_text() {
    let root = root("a: &x 5\nb: &y\n  # why\n  c: 1\nd: *x\ne: &empty\n");
    let at = |key: &str| {
        let span = root.get(key).unwrap().span;
        (span.line, span.col)
    };
    assert_eq!(at("a"), (1, 7));
    assert_eq!(at("b"), (4, 3));
    assert_eq!(at("d"), (1, 7), "an alias is its anchor's node");
    assert_eq!(at("e"), (6, 1), "an empty value points at its key");
    let scalar = root.get("a").unwrap().as_scalar().unwrap();
    assert_eq!(scalar.verbatim_col, Some(7));
}

#[test]
fn a_tag_is_refused_where_it_is_written() {
    let reading = read_yaml(
        Path::new("pipe.yaml"),
        "lr: !!str 1.0\nx: &a !local y\n".into(),
    );
    let diagnostics = reading.document.unwrap_err();
    let found: Vec<(&str, usize, usize, usize)> = diagnostics
        .iter()
        .map(|diagnostic| {
            let location = diagnostic.location.as_ref().unwrap();
            (diagnostic.code, location.line, location.col, location.len)
        })
        .collect();
    assert_eq!(found, [("yaml-tag", 1, 5, 5), ("yaml-tag", 2, 7, 6)]);
}

#[test]
fn the_events_are_written_in_the_test_suites_notation() {
    let reading = read_yaml(
        Path::new("pipe.yaml"),
        "--- &m\na: [&s 'q', *s]\nb: |\n  x\n...\n".into(),
    );
    assert_eq!(
        reading.events,
        [
            "+STR",
            "+DOC ---",
            "+MAP &m",
            "=VAL :a",
            "+SEQ []",
            "=VAL &s 'q",
            "=ALI *s",
            "-SEQ",
            "=VAL :b",
            "=VAL |x\\n",
            "-MAP",
            "-DOC ...",
            "-STR",
        ]
    );
}

#[test]
fn an_error_at_the_end_of_a_text_without_a_final_line_break_points_at_its_last_line() {
    let diagnostics = read_yaml(Path::new("pipe.yaml"), "a: 1\nb: [c".into())
        .document
        .unwrap_err();
    let located: Vec<(&str, usize, usize)> = diagnostics
        .iter()
        .map(|diagnostic| {
            let location = diagnostic.location.as_ref().unwrap();
            (diagnostic.code, location.line, location.col)
        })
        .collect();
    assert_eq!(located, [("yaml-syntax", 2, 6)]);
}
