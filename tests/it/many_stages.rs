//! Output that stays readable at hundreds of stages: a 200-sample matrix
//! whose one changed sample reruns one stage and prints a screenful, a
//! count of stages done on every line that ran, fresh stages folded by
//! matrix, restored ones after the first few, and a failed stage named in
//! the final line. Through the real binary, its plain (log) output.

use pipe_test_support::TestProject;

const SAMPLES: usize = 200;

fn samples_project() -> TestProject {
    let project = TestProject::new();
    let names: Vec<String> = (0..SAMPLES).map(|i| format!("S{i:03}")).collect();
    for name in &names {
        project.write(&format!("data/{name}.txt"), &format!("{name}\n"));
    }
    project.write(
        "pipe.yaml",
        &format!(
            "params:
  scale: 2
stages:
  clean:
    matrix:
      sample: [{}]
    run: mkdir -p clean && test \"$(cat data/${{matrix.sample}}.txt)\" != broken && (cat data/${{matrix.sample}}.txt; echo ${{params.scale}}) > clean/${{matrix.sample}}.txt
    deps:
      - data/${{matrix.sample}}.txt
    outs:
      - clean/${{matrix.sample}}.txt
",
            names.join(", ")
        ),
    );
    project
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_one_sample_change_in_a_200_sample_matrix_prints_a_screenful_with_a_counter() {
    let project = samples_project();
    let cold = project.pipe(&["run"]);
    assert!(cold.status.success(), "{}", stderr(&cold));
    assert!(
        stderr(&cold).contains(&format!("[{SAMPLES}/{SAMPLES}]")),
        "{}",
        stderr(&cold)
    );

    project.write("data/S042.txt", "S042 edited\n");
    // Status folds the expansions that share their state.
    let status = String::from_utf8_lossy(&project.pipe(&["status"]).stdout).into_owned();
    assert!(status.lines().count() <= 5, "{status}");
    assert!(
        status.contains("clean ×42") && status.contains("clean ×157"),
        "{status}"
    );
    assert!(status.contains("clean@sample=S042  stale"), "{status}");
    let dry =
        String::from_utf8_lossy(&project.pipe(&["run", "-n", "-S", "scale=4"]).stdout).into_owned();
    assert!(
        dry.contains("clean ×157") && dry.contains("would run"),
        "{dry}"
    );
    assert!(dry.lines().count() <= 10, "{dry}");
    let one = project.pipe(&["run"]);
    let text = stderr(&one);
    assert!(one.status.success(), "{text}");
    assert!(
        text.lines().count() <= 10,
        "{} lines:\n{text}",
        text.lines().count()
    );
    assert!(text.contains("✓ ran      clean@sample=S042"), "{text}");
    assert!(
        text.contains(&format!("/{SAMPLES}]")),
        "the counter: {text}"
    );
    assert!(
        text.contains(&format!("· fresh    clean ×{}", SAMPLES - 1)),
        "{text}"
    );
    assert!(text.contains("run #2 succeeded: 1 ran"), "{text}");

    // A param there and back: 200 restored, a few lines.
    let changed = project.pipe(&["run", "-S", "scale=3"]);
    assert!(changed.status.success());
    // The diff of a param change over 200 expansions: folded by matrix.
    let diff = String::from_utf8_lossy(&project.pipe(&["diff"]).stdout).into_owned();
    assert!(
        diff.lines().count() <= 30,
        "{} lines:\n{diff}",
        diff.lines().count()
    );
    assert!(diff.contains("clean ×"), "{diff}");
    assert!(diff.contains("more of `clean`'s expansions"), "{diff}");
    let every = String::from_utf8_lossy(&project.pipe(&["diff", "-v"]).stdout).into_owned();
    assert!(every.lines().count() > SAMPLES, "{every}");
    let back = project.pipe(&["run"]);
    let text = stderr(&back);
    assert!(text.lines().count() <= 10, "{text}");
    assert!(
        text.contains(&format!("↺ restored clean ×{} more", SAMPLES - 3)),
        "{text}"
    );

    // `-v`: every stage.
    let verbose = project.pipe(&["run", "-v", "-S", "scale=3"]);
    assert!(
        stderr(&verbose).lines().count() > SAMPLES,
        "{}",
        stderr(&verbose)
    );

    // A failure: its stage named in the last line.
    project.write("data/S007.txt", "broken\n");
    let failed = project.pipe(&["run"]);
    let text = stderr(&failed);
    let last = text.lines().last().unwrap_or_default();
    assert!(last.contains("1 failed (clean@sample=S007)"), "{text}");
}

#[test]
fn the_dag_of_a_matrix_is_one_line_per_base_and_every_stage_with_dash_v() {
    let project = samples_project();
    project.write(
        "pipe.yaml",
        &(project.read("pipe.yaml")
            + "  aggregate:\n    run: cat clean/*.txt > all.txt\n    deps: [clean/S000.txt, clean/S001.txt]\n    outs: [all.txt]\n"),
    );
    let dag = String::from_utf8_lossy(&project.pipe(&["dag"]).stdout).into_owned();
    let lines: Vec<Vec<&str>> = dag
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines,
        [
            vec!["clean", &format!("×{SAMPLES}")],
            vec!["aggregate", "<-", "clean", "×2", "of", &SAMPLES.to_string()]
        ],
        "{dag}"
    );
    assert!(dag.lines().all(|line| line.chars().count() <= 100), "{dag}");
    let every = String::from_utf8_lossy(&project.pipe(&["dag", "-v"]).stdout).into_owned();
    assert_eq!(every.lines().count(), SAMPLES + 2, "{every}");
}

#[test]
fn dash_n_is_a_dry_run_as_in_make_and_snakemake() {
    let project = samples_project();
    let dry = project.pipe(&["run", "-n"]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    assert!(!project.exists("clean/S000.txt"), "a dry run ran");
    let said = String::from_utf8_lossy(&dry.stdout).into_owned() + &stderr(&dry);
    assert!(said.contains("would run"), "{said}");
}

#[test]
fn a_matrix_of_records_lays_out_batches_and_samples_each_field_referable() {
    let project = TestProject::new();
    for (batch, sample) in [("b1", "x"), ("b1", "y"), ("b2", "x")] {
        project.write(
            &format!("data/{batch}/{sample}.txt"),
            &format!("{batch}/{sample}\n"),
        );
    }
    project.write(
        "pipe.yaml",
        "params:
  samples:
    - {batch: b1, sample: x}
    - {batch: b1, sample: y}
    - {batch: b2, sample: x}
stages:
  clean:
    matrix: ${params.samples}
    run: mkdir -p out/${matrix.batch} && cat data/${matrix.batch}/${matrix.sample}.txt > out/${matrix.batch}/${matrix.sample}.txt
    deps:
      - data/${matrix.batch}/${matrix.sample}.txt
    outs:
      - out/${matrix.batch}/${matrix.sample}.txt
",
    );
    let run = project.run_ok(&[]);
    let mut ran: Vec<String> = run.ran().iter().map(|stage| stage.to_string()).collect();
    ran.sort();
    assert_eq!(
        ran,
        [
            "clean@batch=b1,sample=x",
            "clean@batch=b1,sample=y",
            "clean@batch=b2,sample=x"
        ],
    );
    assert_eq!(project.read("out/b2/x.txt"), "b2/x\n");
    // Records with other fields, or twice the same: located errors.
    project.write(
        "pipe.yaml",
        "stages:\n  a:\n    matrix:\n      - {batch: b1, sample: x}\n      - {batch: b1}\n      - {batch: b1, sample: x}\n    run: echo ${matrix.batch}\n",
    );
    let refused = project.pipe(&["validate"]);
    assert_eq!(refused.status.code(), Some(2));
    let said = stderr(&refused);
    assert!(
        said.contains("error[bad-matrix-record]") && said.contains("pipe.yaml:5:9"),
        "{said}"
    );
    assert!(said.contains("error[duplicate-matrix-value]"), "{said}");
}
