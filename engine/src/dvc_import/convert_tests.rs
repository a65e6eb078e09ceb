use super::*;
use crate::dvc_import::{init_from_dvc, FindingKind, FromDvc};

fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    dir
}

fn said(conversion: &Conversion, kind: FindingKind, text: &str) -> bool {
    conversion.findings.iter().any(|finding| {
        finding.kind == kind && format!("{}: {}", finding.what, finding.why).contains(text)
    })
}

#[test]
fn items_that_are_mappings_are_written_out_one_stage_each_and_the_file_loads() {
    let dir = project(&[(
        "dvc.yaml",
        "stages:\n  train:\n    foreach:\n      - {name: a, lr: 0.5}\n      - {name: b, lr: 1e-3}\n    do:\n      cmd: echo ${item.lr} > ${item.name}.txt\n      outs: [\"${item.name}.txt\"]\n  odd name!:\n    matrix:\n      path: [x/1, x/2]\n    cmd: echo ${item.path} > out-${key}\n    outs: [\"out-${key}\"]\n",
    )]);
    let FromDvc::Written(written) = init_from_dvc(dir.path()).expect("converted") else {
        panic!("nothing was there to overwrite");
    };
    assert!(
        written.load_error.is_none(),
        "{:?}\n{}",
        written.load_error,
        written.conversion.text
    );
    let text = &written.conversion.text;
    // A list of mappings is named by index, as DVC names it.
    assert!(
        text.contains("  train-0:\n    run: echo 0.5 > a.txt\n"),
        "{text}"
    );
    assert!(
        text.contains("  train-1:\n    run: echo 0.001 > b.txt\n"),
        "{text}"
    );
    // A value with a `/` names no pipe matrix stage: one stage each.
    assert!(
        text.contains("  odd_name_-x_1:\n    run: echo x/1 > out-x/1\n"),
        "{text}"
    );
    assert!(said(
        &written.conversion,
        FindingKind::Changed,
        "named `odd_name_`"
    ));
    assert!(said(
        &written.conversion,
        FindingKind::Changed,
        "`train@0` is `train-0`"
    ));
}

#[test]
fn a_wdir_stage_reads_its_own_params_file_and_top_level_metrics_find_their_stage() {
    let dir = project(&[
        ("params.yaml", "lr: 1\n"),
        ("sub/params.yaml", "depth: 2\n"),
        (
            "dvc.yaml",
            "stages:\n  fit:\n    wdir: sub\n    cmd: python fit.py\n    deps: [fit.py, ../data.csv]\n    params: [depth]\n    outs: [model.bin, scores.json]\n    metrics: [report.yaml]\nmetrics:\n  - sub/scores.json\n  - nowhere.json\nplots:\n  - cmp:\n      x: {a.csv: step}\n      y: {b.csv: loss}\n",
        ),
    ]);
    let conversion = convert(dir.path()).expect("converted");
    let text = &conversion.text;
    assert!(text.contains("run: cd sub && python fit.py\n"), "{text}");
    assert!(
        text.contains("deps: [sub/fit.py, data.csv, sub/params.yaml]"),
        "{text}"
    );
    assert!(
        text.contains("outs: [sub/model.bin, sub/report.yaml]"),
        "{text}"
    );
    assert!(text.contains("metrics: [sub/scores.json]"), "{text}");
    assert!(said(
        &conversion,
        FindingKind::NotCarried,
        "params `depth` of `sub/params.yaml`"
    ));
    assert!(said(
        &conversion,
        FindingKind::NotCarried,
        "metrics file `sub/report.yaml`"
    ));
    assert!(said(
        &conversion,
        FindingKind::NotCarried,
        "metrics file `nowhere.json`: no stage"
    ));
    assert!(said(
        &conversion,
        FindingKind::NotCarried,
        "plot `cmp`: it draws from several files"
    ));
    let located = conversion
        .findings
        .iter()
        .find(|finding| finding.what.contains("nowhere.json"))
        .and_then(|finding| finding.location.as_ref())
        .expect("located");
    assert_eq!((located.line, located.col), (11, 5));
}

#[test]
fn what_dvc_refuses_stops_the_conversion_at_its_place() {
    for (dvc_yaml, line, col) in [
        ("stages:\n  a:\n    deps: [x]\n", 3, 5),
        ("stages:\n  a:\n    cmd: echo ${x[}\n", 3, 15),
        ("vars:\n  - nope.yaml\nstages:\n  a:\n    cmd: echo\n", 2, 5),
        ("stages: {}\n", 1, 1),
    ] {
        let dir = project(&[("dvc.yaml", dvc_yaml)]);
        let Err(crate::EngineError::Spec(diagnostics)) = convert(dir.path()) else {
            panic!("{dvc_yaml:?} converted");
        };
        let location = diagnostics[0].location.as_ref().expect("located");
        assert_eq!(
            (location.line, location.col),
            (line, col),
            "{dvc_yaml:?}: {}",
            diagnostics[0]
        );
    }
}
