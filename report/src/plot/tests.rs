use pipe_protocol::{PlotKind, PlotSpec};

use super::*;

fn table(file: &str, text: &str) -> DataTable {
    DataTable::read(file, text.as_bytes()).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn error(file: &str, text: &str) -> String {
    DataTable::read(file, text.as_bytes())
        .map(|_| ())
        .unwrap_err()
        .to_string()
}

#[test]
fn csv_tsv_json_records_dvc_objects_and_json_lines_read_as_the_same_columns() {
    let csv = table(
        "roc.csv",
        "fpr,tpr,threshold\n0,0,1\n0.5,\"0.8\",0.5\r\n1,1,0\n",
    );
    let tsv = table(
        "roc.tsv",
        "fpr\ttpr\tthreshold\n0\t0\t1\n0.5\t0.8\t0.5\n1\t1\t0\n",
    );
    let records = r#"[{"fpr": 0, "tpr": 0, "threshold": 1},
        {"fpr": 0.5, "tpr": 0.8, "threshold": 0.5}, {"fpr": 1, "tpr": 1, "threshold": 0}]"#;
    let json = table("roc.json", records);
    let dvc = table("roc.json", &format!("{{\"roc\": {records}}}"));
    let lines = table(
        "roc.jsonl",
        "{\"fpr\": 0, \"tpr\": 0, \"threshold\": 1}\n{\"fpr\": 0.5, \"tpr\": 0.8, \"threshold\": 0.5}\n\n{\"fpr\": 1, \"tpr\": 1, \"threshold\": 0}\n",
    );
    for read in [&csv, &tsv, &json, &dvc, &lines] {
        assert_eq!(read.names, ["fpr", "tpr", "threshold"], "{}", read.file);
        assert_eq!(
            read.numbers("tpr").unwrap(),
            [0.0, 0.8, 1.0],
            "{}",
            read.file
        );
    }
    // Without an extension the first characters tell.
    assert_eq!(table("roc", records).names, json.names);
    assert_eq!(table("log", "step\tloss\n1\t0.5\n").names, ["step", "loss"]);
}

#[test]
fn a_quoted_csv_field_keeps_its_commas_quotes_and_line_breaks() {
    let read = table(
        "labels.csv",
        "actual,predicted\n\"cat, big\",\"say \"\"hi\"\"\"\n\"two\nlines\",dog\n",
    );
    let actual: Vec<String> = read
        .column("actual")
        .unwrap()
        .iter()
        .map(Datum::label)
        .collect();
    assert_eq!(actual, ["cat, big", "two\nlines"]);
    assert_eq!(read.column("predicted").unwrap()[0].label(), "say \"hi\"");
    let unclosed = error("a.csv", "x,y\n1,\"2\n");
    assert!(
        unclosed.contains("line 2: a quoted field is never closed"),
        "{unclosed}"
    );
}

#[test]
fn bad_data_is_an_error_naming_the_file_row_and_column() {
    let read = table("eval/roc.csv", "fpr,tpr\n0,0\n0.5,high\n");
    let not_a_number = read.numbers("tpr").unwrap_err().to_string();
    assert_eq!(
        not_a_number,
        "plot file `eval/roc.csv`: column `tpr`, row 2: `high` is not a number"
    );
    let missing = read.numbers("recall").unwrap_err().to_string();
    assert_eq!(
        missing,
        "plot file `eval/roc.csv`: no column `recall`; its columns: fpr, tpr"
    );
    assert!(error("a.csv", "x,y\n1,2,3\n").contains("line 2 has 3 fields, the header 2"));
    assert!(error("a.json", "{\"a\": [], \"b\": []}").contains("an object of 2 keys"));
    assert!(error("a.json", "[1, 2]").contains("record 1 is a number, not a record"));
    assert!(error("a.json", "{\"prc\": 3}").contains("`prc` holds a number"));
    assert!(error("a.jsonl", "{\"a\": 1}\nnope\n").contains("line 2: not JSON"));
    assert!(error("a.csv", "x,x\n1,2\n").contains("the column `x` is named twice"));
    assert!(error("a.csv", "").contains("empty"));
    let binary = DataTable::read("a.csv", b"x\n\xff\xfe")
        .unwrap_err()
        .to_string();
    assert_eq!(binary, "plot file `a.csv`: not UTF-8 text (byte 3)");
}

#[test]
fn a_file_past_a_limit_is_refused_before_it_is_drawn() {
    let mut rows = String::from("x\n");
    for _ in 0..=MAX_PLOT_ROWS {
        rows.push_str("1\n");
    }
    assert!(error("big.csv", &rows).contains("more than 1000000 rows"));
    let wide: Vec<String> = (0..=MAX_PLOT_COLUMNS).map(|i| format!("c{i}")).collect();
    assert!(error("wide.csv", &wide.join(",")).contains("more than 1000 columns"));
    let many_keys: Vec<String> = (0..=MAX_PLOT_COLUMNS)
        .map(|i| format!("{{\"k{i}\": 1}}"))
        .collect();
    assert!(error("keys.jsonl", &many_keys.join("\n")).contains("more than 1000 columns"));
    let over = vec![b'1'; MAX_PLOT_BYTES as usize + 1];
    let message = DataTable::read("huge.csv", &over).unwrap_err().to_string();
    assert!(message.contains("more than the 67108864"), "{message}");
}

fn spec(kind: PlotKind, x: Option<&str>, y: &[&str]) -> PlotSpec {
    PlotSpec {
        kind,
        x: x.map(str::to_string),
        y: y.iter().map(|y| y.to_string()).collect(),
        ..PlotSpec::new("eval/plots/roc.csv")
    }
}

#[test]
fn unset_columns_default_to_step_or_epoch_or_the_first_and_every_other_numeric_one() {
    let log = table(
        "log.csv",
        "epoch,phase,loss,acc\n1,train,0.5,0.7\n2,train,0.4,0.8\n",
    );
    let chosen = columns(&spec(PlotKind::Line, None, &[]), &log).unwrap();
    assert_eq!(chosen.x, "epoch");
    assert_eq!(chosen.y, ["loss", "acc"], "`phase` is text");
    let roc = table("roc.csv", "fpr,tpr,threshold\n0,0,1\n1,1,0\n");
    let chosen = columns(&spec(PlotKind::Line, None, &[]), &roc).unwrap();
    assert_eq!((chosen.x.as_str(), chosen.y.len()), ("fpr", 2));
    let labels = table("c.csv", "actual,predicted\ncat,dog\n");
    let chosen = columns(&spec(PlotKind::Confusion, None, &[]), &labels).unwrap();
    assert_eq!(
        (chosen.x.as_str(), chosen.y[0].as_str()),
        ("actual", "predicted")
    );
    let wrong = columns(&spec(PlotKind::Line, Some("fpr"), &["TPR"]), &roc).unwrap_err();
    assert!(wrong.to_string().contains("no column `TPR`"), "{wrong}");
}

fn polylines(svg: &str) -> Vec<&str> {
    svg.split("<g class=\"series\"")
        .skip(1)
        .filter_map(|group| group.split("</g>").next())
        .filter(|group| group.contains("<polyline fill=\"none\""))
        .collect()
}

#[test]
fn a_roc_curve_is_one_polyline_per_run_keyed_and_named_in_the_legend() {
    let a = table("roc.csv", "fpr,tpr\n0,0\n0.2,0.7\n1,1\n");
    let b = table("roc.csv", "fpr,tpr\n0,0\n0.4,0.6\n1,1\n");
    let runs = [
        PlotRun {
            name: "#1 noise=0.1".into(),
            key: Some("1".into()),
            data: &a,
        },
        PlotRun {
            name: "#2 noise=0.3".into(),
            key: Some("2".into()),
            data: &b,
        },
    ];
    let figures = draw(&spec(PlotKind::Line, Some("fpr"), &["tpr"]), &runs).unwrap();
    assert_eq!(figures.len(), 1);
    let svg = &figures[0].svg;
    assert_eq!(polylines(svg).len(), 2, "{svg}");
    assert!(svg.contains("data-key=\"1\"") && svg.contains("data-key=\"2\""));
    assert!(svg.contains("#2 noise=0.3"), "{svg}");
    // Drawn again from the same data: the same bytes.
    assert_eq!(
        draw(&spec(PlotKind::Line, Some("fpr"), &["tpr"]), &runs).unwrap(),
        figures
    );
}

#[test]
fn scatter_draws_dots_only_and_step_draws_a_staircase() {
    let data = table("p.csv", "x,y\n0,0\n1,1\n2,0\n");
    let run = [PlotRun {
        name: String::new(),
        key: None,
        data: &data,
    }];
    let scatter = &draw(&spec(PlotKind::Scatter, None, &[]), &run).unwrap()[0].svg;
    assert!(polylines(scatter).is_empty(), "{scatter}");
    assert_eq!(scatter.matches("<circle").count(), 3, "{scatter}");
    let step = &draw(&spec(PlotKind::Step, None, &[]), &run).unwrap()[0].svg;
    let line = polylines(step)[0];
    let points = line
        .split("points=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    // Three points and a corner before each of the last two.
    assert_eq!(points.split_whitespace().count(), 5, "{line}");
}

#[test]
fn a_confusion_matrix_counts_label_pairs_with_labels_sorted_and_normalises_rows() {
    let data = table(
        "confusion.csv",
        "actual,predicted\n10,10\n2,10\n2,2\n2,2\n10,10\n",
    );
    let run = [PlotRun {
        name: String::new(),
        key: None,
        data: &data,
    }];
    let figure = &draw(&spec(PlotKind::Confusion, None, &[]), &run).unwrap()[0];
    let counted = figure.table.as_ref().unwrap();
    // 2 before 10: numbers sort as numbers.
    assert_eq!(counted.columns, ["actual \\ predicted", "2", "10"]);
    let counts: Vec<Vec<String>> = counted
        .rows
        .iter()
        .map(|row| row.iter().map(|cell| cell.text.clone()).collect())
        .collect();
    assert_eq!(counts, [["2", "2", "1"], ["10", "0", "2"]]);
    assert!(figure.svg.contains("heat-map"), "{}", figure.svg);
    let normalised = &draw(&spec(PlotKind::ConfusionNormalized, None, &[]), &run).unwrap()[0];
    assert!(normalised.svg.contains("0.6667"), "{}", normalised.svg);
    let text = table("confusion.csv", "a,p\ncat,dog\nant,cat\n");
    let run = [PlotRun {
        name: String::new(),
        key: None,
        data: &text,
    }];
    let figure = &draw(&spec(PlotKind::Confusion, None, &[]), &run).unwrap()[0];
    assert_eq!(
        figure.table.as_ref().unwrap().columns,
        ["a \\ p", "ant", "cat", "dog"]
    );
}

#[test]
fn bars_are_one_group_per_category_and_one_series_per_run() {
    let a = table("f.csv", "feature,importance\nage,0.5\nincome,0.3\n");
    let b = table("f.csv", "feature,importance\nincome,0.4\nzip,0.1\n");
    let runs = [
        PlotRun {
            name: "#1".into(),
            key: None,
            data: &a,
        },
        PlotRun {
            name: "#2".into(),
            key: None,
            data: &b,
        },
    ];
    let svg = &draw(&spec(PlotKind::Bar, None, &[]), &runs).unwrap()[0].svg;
    for label in ["age", "income", "zip", "#1", "#2"] {
        assert!(svg.contains(label), "{label}: {svg}");
    }
}

#[test]
fn a_long_curve_is_thinned_keeping_its_last_point() {
    let mut text = String::from("x,y\n");
    for i in 0..(3 * MAX_DRAWN_POINTS) {
        text.push_str(&format!("{i},{}\n", i * 2));
    }
    let data = table("long.csv", &text);
    let run = [PlotRun {
        name: String::new(),
        key: None,
        data: &data,
    }];
    let svg = &draw(&spec(PlotKind::Line, None, &[]), &run).unwrap()[0].svg;
    let line = polylines(svg)[0];
    let points = line
        .split("points=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert!(points.split_whitespace().count() <= MAX_DRAWN_POINTS + 1);
}
