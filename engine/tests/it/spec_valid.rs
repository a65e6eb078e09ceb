//! Pipelines that load: matrix expansion, interpolation, params merging,
//! implicit edges and what the scheduler gets from them.

use std::path::{Path, PathBuf};

use pipe_engine::ParamOverride;
use pipe_engine::{Dag, DagFormat};
use pipe_engine::{Dep, Pipeline, Stage, StageKind, StageOutRef};
use serde_json::json;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/pipelines")
        .join(name)
}

fn load(file: &Path, overrides: &[&str]) -> Pipeline {
    let overrides: Vec<ParamOverride> = overrides
        .iter()
        .map(|text| ParamOverride::parse(text).unwrap())
        .collect();
    pipe_engine::load_pipeline(file, &overrides, &crate::fixture_catalog())
        .map(|loaded| loaded.pipeline)
        .unwrap_or_else(|error| panic!("{} did not load:\n{error}", file.display()))
}

fn stage<'p>(pipeline: &'p Pipeline, name: &str) -> &'p Stage {
    pipeline
        .stage(name)
        .unwrap_or_else(|| panic!("no stage `{name}`"))
}

fn command(stage: &Stage) -> &str {
    match &stage.kind {
        StageKind::Command { command } => command,
        other => panic!("`{}` is not a command stage: {other:?}", stage.name),
    }
}

fn producer(stage: &str, out: &str) -> Option<StageOutRef> {
    Some(StageOutRef {
        stage: stage.to_string(),
        out: out.to_string(),
    })
}

/// A project in a temporary directory holding `pipe.yaml` and, optionally,
/// `params.yaml`.
fn project(pipeline: &str, params_yaml: Option<&str>) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pipe.yaml");
    std::fs::write(&file, pipeline).unwrap();
    if let Some(text) = params_yaml {
        std::fs::write(dir.path().join("params.yaml"), text).unwrap();
    }
    (dir, file)
}

#[test]
fn matrix_stages_expand_in_place_in_declared_key_order() {
    let pipeline = load(&fixture("sweep.yaml"), &[]);
    let names: Vec<&str> = pipeline
        .stages
        .iter()
        .map(|stage| stage.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "prepare",
            "fit@model=linear,seed=1",
            "fit@model=linear,seed=2",
            "fit@model=linear,seed=3",
            "fit@model=mlp,seed=1",
            "fit@model=mlp,seed=2",
            "fit@model=mlp,seed=3",
        ]
    );
    let fit = stage(&pipeline, "fit@model=mlp,seed=2");
    assert_eq!(fit.base_name, "fit");
    assert_eq!(fit.matrix.get("model"), Some(&json!("mlp")));
    assert_eq!(fit.matrix.get("seed"), Some(&json!(2)));
    assert_eq!(
        command(fit),
        "python fit.py --model mlp --seed 2 --layers 64 32 --data data/prepared"
    );
    assert_eq!(fit.outs[0].path, "runs/mlp-2/weights.bin");
    assert_eq!(fit.metrics[0].path, "runs/mlp-2/metrics.json");
    assert_eq!(fit.env.get("RUN_NAME").map(String::as_str), Some("mlp-2"));
    assert_eq!(
        fit.env.get("OMP_NUM_THREADS").map(String::as_str),
        Some("2")
    );
    assert_eq!(fit.resources.cpus, 2);
    assert!(stage(&pipeline, "prepare").matrix.is_empty());
    assert_eq!(pipeline.name, "sweep", "the name defaults to the file stem");
}

#[test]
fn every_namespace_interpolates() {
    let pipeline = load(&fixture("imdb.yaml"), &[]);

    let featurize = stage(&pipeline, "featurize");
    assert_eq!(
        command(featurize),
        "python scripts/featurize.py .pipe/out/imdb/extract/dataset data/features.npy --n 512"
    );
    assert_eq!(featurize.deps[0].producer, producer("extract", "dataset"));
    assert_eq!(
        featurize.desc.as_deref(),
        Some("Turn reviews into feature vectors")
    );
    assert_eq!(featurize.metrics[0].name, "metrics/featurize.json");

    let train = stage(&pipeline, "train@precision=bf16-mixed");
    let StageKind::Worker(worker) = &train.kind else {
        panic!("{:?}", train.kind)
    };
    assert_eq!(
        (worker.uses.as_str(), worker.version),
        ("train/classifier", 1)
    );
    // A value that is exactly one reference keeps the referenced type.
    assert_eq!(
        serde_json::Value::Object(worker.with.clone()),
        json!({
            "features": "data/features.npy",
            "precision": "bf16-mixed",
            "lr": 5.0e-5,
            "epochs": 3,
            "seed": 123,
        })
    );
    assert_eq!(worker.path_params, ["features"]);
    assert_eq!(train.resources.gpus, 4);
    assert_eq!(
        train.outs[0].path,
        ".pipe/out/imdb/train@precision=bf16-mixed/model"
    );
    let dep = &train.deps[0];
    assert_eq!(dep.name, "stages.featurize.outs.features");
    assert_eq!(dep.path, "data/features.npy");
    assert_eq!(dep.producer, producer("featurize", "features"));

    let report = stage(&pipeline, "report");
    assert_eq!(
        command(report),
        "python scripts/report.py .pipe/out/imdb/train@precision=32-true/model .pipe/out/imdb/train@precision=bf16-mixed/model > ${OUT:-report.html}"
    );
    assert_eq!(report.deps.len(), 2);
    assert_eq!(
        report.deps[1].name,
        "stages.train@precision=bf16-mixed.outs.model"
    );
    assert_eq!(
        report.deps[1].producer,
        producer("train@precision=bf16-mixed", "model")
    );
    assert!(report.always_run);
    assert_eq!(
        pipeline.link,
        Some(vec![
            pipe_cache::LinkMode::Reflink,
            pipe_cache::LinkMode::Copy
        ])
    );
}

#[test]
fn builtin_outputs_without_declared_paths_live_under_pipe_out() {
    let pipeline = load(&fixture("imdb.yaml"), &[]);
    let download = stage(&pipeline, "download");
    let outs: Vec<(&str, &str)> = download
        .outs
        .iter()
        .map(|out| (out.name.as_str(), out.path.as_str()))
        .collect();
    assert_eq!(outs, [("file", ".pipe/out/imdb/download/file")]);
    let extract = stage(&pipeline, "extract");
    let StageKind::Worker(worker) = &extract.kind else {
        panic!()
    };
    assert_eq!(
        worker.with.get("archive"),
        Some(&json!(".pipe/out/imdb/download/file"))
    );
    assert_eq!(extract.deps[0].producer, producer("download", "file"));
}

#[test]
fn params_used_records_interpolated_and_listed_params() {
    let pipeline = load(&fixture("sweep.yaml"), &[]);
    let fit = stage(&pipeline, "fit@model=linear,seed=1");
    let used: Vec<(&str, &serde_json::Value)> = fit
        .params_used
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    // `seeds` feeds the matrix, not the command, so it is not listed: the
    // matrix value is part of the stage's name and key already.
    assert_eq!(used, [("layers", &json!([64, 32])), ("lr", &json!(0.01))]);
    assert!(stage(&pipeline, "prepare").params_used.is_empty());
}

#[test]
fn dollar_dollar_brace_is_a_literal_and_plain_dollars_pass_through() {
    let (_dir, file) = project(
        "params: { n: 2 }\nstages:\n  s:\n    run: echo $${HOME} $HOME $$ ${params.n} '$${params.n}'\n",
        None,
    );
    let pipeline = load(&file, &[]);
    assert_eq!(
        command(&pipeline.stages[0]),
        "echo ${HOME} $HOME $$ 2 '${params.n}'"
    );
    assert_eq!(pipeline.stages[0].params_used.len(), 1);
}

#[test]
fn numbers_print_as_written_and_lists_join_with_spaces() {
    let (_dir, file) = project(
        "params: { lr: 5.0e-5, hex: 0x1F, flags: [--a, --b], empty: ~ }\nstages:\n  s:\n    run: t ${params.lr} ${params.hex} ${params.flags}\n",
        None,
    );
    let pipeline = load(&file, &[]);
    assert_eq!(command(&pipeline.stages[0]), "t 5.0e-5 0x1F --a --b");
    assert_eq!(
        pipeline.params,
        json!({ "lr": 5.0e-5, "hex": 31, "flags": ["--a", "--b"], "empty": null })
    );
}

const PARAMS_PIPELINE: &str = "\
params:
  seed: 1
  keep: inline
  train: { lr: 0.1, epochs: 3, optimizer: { name: adam, beta: 0.9 } }
  seeds: [1, 2]
stages:
  fit:
    matrix: { seed: \"${params.seeds}\" }
    run: python fit.py --seed ${matrix.seed} --lr ${params.train.lr} --opt ${params.train.optimizer.name}
    outs: [\"out/${matrix.seed}\"]
    params: [train.epochs, seed]
";

#[test]
fn params_yaml_wins_over_inline_params_and_merges_deeply() {
    let (_dir, file) = project(
        PARAMS_PIPELINE,
        Some("seed: 7\ntrain:\n  lr: 0.5\n  optimizer: { beta: 0.95 }\n"),
    );
    let pipeline = load(&file, &[]);
    assert_eq!(
        pipeline.params,
        json!({
            "seed": 7,
            "keep": "inline",
            "train": { "lr": 0.5, "epochs": 3, "optimizer": { "name": "adam", "beta": 0.95 } },
            "seeds": [1, 2],
        })
    );
    let fit = stage(&pipeline, "fit@seed=2");
    assert_eq!(command(fit), "python fit.py --seed 2 --lr 0.5 --opt adam");
    let used: Vec<&str> = fit.params_used.keys().map(String::as_str).collect();
    assert_eq!(
        used,
        ["seed", "train.epochs", "train.lr", "train.optimizer.name"]
    );
    assert_eq!(fit.params_used["seed"], json!(7));
}

#[test]
fn overrides_apply_in_order_after_params_yaml() {
    let (_dir, file) = project(PARAMS_PIPELINE, Some("train:\n  lr: 0.5\n"));
    let pipeline = load(
        &file,
        &[
            "train.lr=0.25",
            "train.lr=1",         // an int where a float was: allowed
            "+train.warmup=100",  // a new key, asked for with `+`: added
            "++train.lr=1",       // `++`: set, whether it exists or not
            "seeds=[3, 4, 5]",    // a list, parsed as YAML
            "keep=\"quoted 42\"", // a quoted string
        ],
    );
    assert_eq!(pipeline.params["train"]["lr"], json!(1));
    assert_eq!(pipeline.params["train"]["warmup"], json!(100));
    assert_eq!(pipeline.params["keep"], json!("quoted 42"));
    let names: Vec<&str> = pipeline
        .stages
        .iter()
        .map(|stage| stage.name.as_str())
        .collect();
    assert_eq!(names, ["fit@seed=3", "fit@seed=4", "fit@seed=5"]);
    assert_eq!(
        command(&pipeline.stages[0]),
        "python fit.py --seed 3 --lr 1 --opt adam"
    );
}

#[test]
fn dvc_style_path_dependencies_become_edges() {
    let pipeline = load(&fixture("dvc-style/pipe.yaml"), &[]);
    let train = stage(&pipeline, "train");
    assert_eq!(train.deps[0].producer, None, "`train.py` is a source file");
    // A path inside another stage's output directory depends on that output.
    assert_eq!(train.deps[1].producer, producer("split", "data/split"));
    let evaluate = stage(&pipeline, "evaluate");
    assert_eq!(evaluate.deps[1].producer, producer("train", "model.pkl"));
    assert_eq!(
        command(stage(&pipeline, "split")),
        "python split.py --seed 7 data/raw.csv data/split"
    );
    assert_eq!(train.params_used["train.lr"], json!(0.001));
}

#[test]
fn paths_are_normalised_before_they_are_compared() {
    let (_dir, file) = project(
        "stages:\n  a:\n    run: a\n    outs: [./data//raw/]\n  b:\n    run: b\n    deps: [data/x/../raw/file.csv]\n",
        None,
    );
    let pipeline = load(&file, &[]);
    assert_eq!(pipeline.stages[0].outs[0].path, "data/raw");
    assert_eq!(pipeline.stages[1].deps[0].path, "data/raw/file.csv");
    assert_eq!(
        pipeline.stages[1].deps[0].producer,
        producer("a", "data/raw")
    );
}

#[test]
fn locations_point_at_the_stage_name_and_path_scalars() {
    let pipeline = load(&fixture("dvc-style/pipe.yaml"), &[]);
    let train = stage(&pipeline, "train");
    let location = train.location.as_ref().unwrap();
    assert_eq!((location.line, location.col, location.len), (8, 3, 5));
    assert_eq!(*location.file, *fixture("dvc-style/pipe.yaml"));
    let dep = train.deps[1].location.as_ref().unwrap();
    assert_eq!((dep.line, dep.col), (10, 22));
    assert_eq!(
        &*dep.source_line,
        "    deps: [train.py, data/split/train.csv]"
    );
}

#[test]
fn the_project_root_is_the_nearest_directory_with_pipe_or_git_state() {
    let (dir, file) = project("stages:\n  s:\n    run: s\n", None);
    assert_eq!(load(&file, &[]).root, dir.path().canonicalize().unwrap());

    std::fs::create_dir_all(dir.path().join(".pipe")).unwrap();
    std::fs::create_dir_all(dir.path().join("pipelines")).unwrap();
    let nested = dir.path().join("pipelines/nested.yaml");
    std::fs::write(&nested, "stages:\n  s:\n    run: s\n").unwrap();
    assert_eq!(load(&nested, &[]).root, dir.path().canonicalize().unwrap());
}

#[test]
fn a_hundred_thousand_matrix_stages_load() {
    let a: Vec<String> = (0..1000).map(|value| value.to_string()).collect();
    let b: Vec<String> = (0..100).map(|value| format!("v{value}")).collect();
    let text = format!(
        "stages:\n  prepare:\n    run: prep\n    outs: [data]\n  work:\n    matrix:\n      a: [{}]\n      b: [{}]\n    run: work ${{matrix.a}} ${{matrix.b}} ${{deps.data}}\n    deps: {{ data: \"data/part-${{matrix.a}}.csv\" }}\n    outs: [\"out/${{matrix.a}}/${{matrix.b}}\"]\n",
        a.join(", "),
        b.join(", ")
    );
    let (_dir, file) = project(&text, None);
    let pipeline = load(&file, &[]);
    assert_eq!(pipeline.stages.len(), 100_001);
    let last = pipeline.stages.last().unwrap();
    assert_eq!(last.name, "work@a=999,b=v99");
    assert_eq!(command(last), "work 999 v99 data/part-999.csv");
    assert_eq!(last.deps[0].producer, producer("prepare", "data"));
    let dag = Dag::build(&pipeline).unwrap();
    assert_eq!(dag.order.len(), 100_001);
    assert_eq!(dag.downstream[0].len(), 100_000);
}

#[test]
fn topological_order_puts_producers_first_and_keeps_declaration_order_otherwise() {
    let (_dir, file) = project(
        "stages:\n  report:\n    run: r\n    deps: [model.pt, stats.json]\n  stats:\n    run: s\n    outs: [stats.json]\n  train:\n    run: t\n    deps: [data.csv]\n    outs: [model.pt]\n  data:\n    run: d\n    outs: [data.csv]\n  lint:\n    run: l\n",
        None,
    );
    let pipeline = load(&file, &[]);
    let dag = Dag::build(&pipeline).unwrap();
    let order: Vec<&str> = dag
        .order
        .iter()
        .map(|&index| pipeline.stages[index].name.as_str())
        .collect();
    // Whenever several stages are ready, the first declared goes first.
    assert_eq!(order, ["stats", "data", "train", "report", "lint"]);
    assert_eq!(dag.upstream[0], [1, 2]);
    assert_eq!(dag.downstream[3], [2]);
    let closure: Vec<&str> = dag
        .closure(&[2])
        .iter()
        .map(|&index| pipeline.stages[index].name.as_str())
        .collect();
    assert_eq!(closure, ["data", "train"]);
    assert_eq!(
        dag.closure(&[4, 99]),
        [4],
        "out-of-range targets are ignored"
    );
}

#[test]
fn dag_renders_as_ascii_dot_and_mermaid() {
    let pipeline = load(&fixture("imdb.yaml"), &[]);
    let dag = Dag::build(&pipeline).unwrap();
    insta::assert_snapshot!("imdb-ascii", dag.render(&pipeline, DagFormat::Ascii));
    insta::assert_snapshot!("imdb-dot", dag.render(&pipeline, DagFormat::Dot));
    insta::assert_snapshot!("imdb-mermaid", dag.render(&pipeline, DagFormat::Mermaid));
}

#[test]
fn a_cycle_in_a_hand_built_pipeline_is_refused_by_the_dag() {
    let (_dir, file) = project(
        "stages:\n  a:\n    run: a\n    outs: [a.txt]\n  b:\n    run: b\n    outs: [b.txt]\n",
        None,
    );
    let mut pipeline = load(&file, &[]);
    // Paths are made by the loader only: each stage's output, as loaded.
    let (a_txt, b_txt) = (
        pipeline.stages[0].outs[0].path.clone(),
        pipeline.stages[1].outs[0].path.clone(),
    );
    pipeline.stages[0].deps.push(Dep {
        name: "b".into(),
        path: b_txt,
        producer: producer("b", "b.txt"),
        location: None,
    });
    pipeline.stages[1].deps.push(Dep {
        name: "a".into(),
        path: a_txt,
        producer: producer("a", "a.txt"),
        location: None,
    });
    let Err(pipe_engine::EngineError::Spec(diagnostics)) = Dag::build(&pipeline) else {
        panic!("no cycle found")
    };
    assert_eq!(diagnostics[0].code, "cycle");
    assert!(
        diagnostics[0].message.ends_with("`a` -> `b` -> `a`"),
        "{}",
        diagnostics[0].message
    );
}

#[test]
fn a_matrix_stage_names_the_expansion_of_another_by_its_own_matrix_value() {
    let (_dir, file) = project(
        r#"
params:
  precisions: [32-true, bf16-mixed]
stages:
  train:
    matrix: { precision: "${params.precisions}" }
    run: train --precision ${matrix.precision} --out ${outs.model}
    outs: { model: "models/${matrix.precision}" }
  evaluate:
    matrix: { precision: "${params.precisions}", split: [val, test] }
    run: evaluate ${deps.model} ${matrix.split} > ${outs.score}
    deps: { model: "${stages.train@precision=${ matrix.precision }.outs.model}" }
    outs: { score: "scores/${matrix.precision}-${matrix.split}.txt" }
"#,
        None,
    );
    let pipeline = load(&file, &[]);
    let evaluate = stage(&pipeline, "evaluate@precision=bf16-mixed,split=test");
    assert_eq!(evaluate.deps[0].path, "models/bf16-mixed");
    assert_eq!(
        evaluate.deps[0].producer,
        producer("train@precision=bf16-mixed", "model")
    );
    assert_eq!(
        command(evaluate),
        "evaluate models/bf16-mixed test > scores/bf16-mixed-test.txt"
    );
    let dag = Dag::build(&pipeline).unwrap();
    let text = dag.render(&pipeline, DagFormat::Ascii);
    assert!(text.contains("train@precision=32-true"), "{text}");
}

/// The diagnostics of a file that must not load.
fn refused(file: &Path, overrides: &[&str]) -> Vec<pipe_engine::Diagnostic> {
    let overrides: Vec<ParamOverride> = overrides
        .iter()
        .map(|text| ParamOverride::parse(text).unwrap())
        .collect();
    match pipe_engine::load_pipeline(file, &overrides, &crate::fixture_catalog()) {
        Err(pipe_engine::EngineError::Spec(diagnostics)) => diagnostics,
        other => panic!("{} was not refused: {other:?}", file.display()),
    }
}

#[test]
fn plain_values_in_run_go_in_as_written_and_a_list_as_one_word_an_item() {
    let (_dir, file) = project(
        "params: { msg: plain, lr: 5.0e-5, layers: [64, 32] }\nstages:\n  s:\n    run: python train.py --lr ${params.lr} --msg ${params.msg} --layers ${params.layers} > out/x\n",
        None,
    );
    // Plain values are left as written: commands and their keys read as before.
    assert_eq!(
        command(&load(&file, &[]).stages[0]),
        "python train.py --lr 5.0e-5 --msg plain --layers 64 32 > out/x"
    );
    let diagnostics = refused(&file, &["msg=$(touch pwned); rm -rf ~ \"*\" it's"]);
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert_eq!(diagnostics[0].code, "bad-reference");
    assert!(
        diagnostics[0].message.contains("is not plain"),
        "{}",
        diagnostics[0].message
    );
    let location = diagnostics[0].location.as_ref().expect("located");
    assert_eq!((location.line, location.col), (4, 50));
}

#[test]
fn a_value_that_is_not_plain_is_refused_inside_quotes_too_naming_the_ways_that_carry_it() {
    let (_dir, file) = project(
        "params: { msg: x }\nstages:\n  s:\n    run: echo \"msg=${params.msg}\" 'raw=${params.msg}'\n",
        None,
    );
    let diagnostics = refused(&file, &["msg=a \"b\" $(c) `d` \\e 'f'"]);
    let columns: Vec<usize> = diagnostics
        .iter()
        .map(|diagnostic| diagnostic.location.as_ref().expect("located").col)
        .collect();
    assert_eq!(columns, [20, 40]);
    let hint = diagnostics[0].hint.as_deref().unwrap_or_default();
    for way in ["env:", "\"$MSG\"", "run: [", "params: [msg]"] {
        assert!(hint.contains(way), "{way}: {hint}");
    }
}

#[test]
fn raw_splices_a_value_as_shell_text() {
    let (_dir, file) = project(
        "params: { flags: --fast --quiet }\nstages:\n  s:\n    run: python train.py ${raw:params.flags}\n",
        None,
    );
    assert_eq!(
        command(&load(&file, &[]).stages[0]),
        "python train.py --fast --quiet"
    );
}

#[test]
fn run_as_a_list_is_an_argv_with_one_value_per_item() {
    let (_dir, file) = project(
        "params: { msg: x, layers: [64, 32] }\nstages:\n  s:\n    run: [python, train.py, --msg, \"${params.msg}\", \"--tag=${params.msg}!\", \"${params.layers}\", 0.1]\n    outs: { model: \"models/${params.msg}.pt\" }\n",
        None,
    );
    let pipeline = load(&file, &["msg=$(x) y"]);
    assert_eq!(
        pipeline.stages[0].kind,
        StageKind::Argv {
            argv: [
                "python",
                "train.py",
                "--msg",
                "$(x) y",
                "--tag=$(x) y!",
                "64",
                "32",
                "0.1"
            ]
            .map(String::from)
            .to_vec()
        }
    );
    assert_eq!(pipeline.stages[0].outs[0].path, "models/$(x) y.pt");
}

#[test]
fn a_file_name_that_is_no_directory_name_still_names_the_pipeline() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("my sweep (v2).yaml");
    std::fs::write(
        &file,
        "stages:\n  fetch:\n    uses: data/download@1\n    with: { url: \"https://example.org/a.csv\" }\n",
    )
    .unwrap();
    let pipeline = load(&file, &[]);
    assert_eq!(pipeline.name, "my_sweep__v2_");
    assert_eq!(
        stage(&pipeline, "fetch").outs[0].path,
        ".pipe/out/my_sweep__v2_/fetch/file"
    );
}

/// A stage that reports on its run waits for every stage nothing else waits
/// for, runs every time, and stages that read its output come after it.
#[test]
fn a_stage_reading_the_run_comes_after_every_other_stage() {
    let mut catalog = crate::fixture_catalog();
    catalog
        .add(
            Path::new("/fixture/report-worker"),
            vec![pipe_protocol::StageInfo {
                name: "test/report".into(),
                version: 1,
                implementation: 1,
                summary: "a report".into(),
                params: vec![],
                outputs: vec![pipe_protocol::OutputSpec {
                    name: "report".into(),
                    kind: pipe_protocol::OutputKind::Dir,
                    doc: "the report".into(),
                    page: Some("index.html".into()),
                }],
                metrics: vec![],
                devices_param: None,
                nodes_param: None,
                reads_run: true,
                roles: Default::default(),
                rules: Vec::new(),
            }],
        )
        .unwrap();
    let (_dir, file) = project(
        "stages:
  a: { run: echo, outs: [a.txt] }
  b: { run: echo, deps: [a.txt], outs: [b.txt] }
  report: { uses: test/report@1 }
  c: { run: echo, outs: [c.txt] }
  publish: { run: 'cp -r ${stages.report.outs.report} site', outs: [site] }
  after_publish: { run: echo, deps: [site], outs: [d.txt] }
",
        None,
    );
    let loaded = pipe_engine::load_pipeline(&file, &[], &catalog).unwrap_or_else(|e| panic!("{e}"));
    let (pipeline, dag) = (loaded.pipeline, loaded.dag);
    let index = |name: &str| pipeline.stages.iter().position(|s| s.name == name).unwrap();
    let upstream = |name: &str| -> Vec<&str> {
        dag.upstream[index(name)]
            .iter()
            .map(|&i| pipeline.stages[i].name.as_str())
            .collect()
    };
    // `a` is waited for by `b`; the publishing stages read the report.
    assert_eq!(upstream("report"), ["b", "c"]);
    assert_eq!(upstream("publish"), ["report"]);
    // Keyed on the results it reads (crate::run_input), not run every time.
    assert!(!stage(&pipeline, "report").always_run);
    assert!(stage(&pipeline, "report").reads_run());
    let order: Vec<&str> = dag
        .order
        .iter()
        .map(|&i| pipeline.stages[i].name.as_str())
        .collect();
    assert_eq!(order, ["a", "b", "c", "report", "publish", "after_publish"]);
    // Only the report's own edges change the picture: running `c` alone
    // does not pull in the report.
    assert_eq!(dag.closure(&[index("c")]), [index("c")]);
}
