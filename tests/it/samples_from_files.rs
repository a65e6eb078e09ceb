//! A Snakemake-shaped workflow written without a generator (issue 47):
//! 200 samples found from the files present (`matrix: { files: ... }`),
//! one expansion per sample per stage, an aggregation over every
//! expansion (`${stages.featurize@*.outs.feat}`) whose command gets its
//! list from `${deps.feats}`. Adding, editing and deleting a sample file
//! each rerun exactly the stages they should; a deleted sample's outputs
//! are said, never read, and removed on request. Through the real binary.

use std::collections::BTreeSet;

use pipe_test_support::TestProject;
use serde_json::Value;

const SAMPLES: usize = 200;

/// The whole workflow, as examples/samples/ keeps it beside its Snakefile:
/// about as many lines.
const WORKFLOW: &str = include_str!("../../examples/samples/pipe.yaml");

fn sample_project() -> TestProject {
    let project = TestProject::new();
    for index in 0..SAMPLES {
        project.write(
            &format!("data/raw/S{index:03}.txt"),
            &format!("sample {index}\n"),
        );
    }
    // Not a sample: the pattern does not match it.
    project.write("data/raw/README.md", "raw reads\n");
    project.write("pipe.yaml", WORKFLOW);
    project
}

/// The stages a `pipe run --json` ran, and its exit status.
fn ran(project: &TestProject, extra: &[&str]) -> BTreeSet<String> {
    let mut args = vec!["run", "--json"];
    args.extend_from_slice(extra);
    let output = project.pipe(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["event"] == "stage_finished" && event["status"] == "ran")
        .filter_map(|event| event["stage"].as_str().map(str::to_string))
        .collect()
}

fn names(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| name.to_string()).collect()
}

#[test]
fn samples_added_edited_and_deleted_rerun_exactly_their_stages_and_the_aggregation() {
    let project = sample_project();
    assert!(WORKFLOW.lines().count() <= 20);
    let cold = ran(&project, &["-j", "2"]);
    assert_eq!(cold.len(), 2 * SAMPLES + 1, "{cold:?}");
    let summary = project.read("results/summary.txt");
    assert_eq!(summary.lines().count(), SAMPLES, "{summary}");
    assert!(
        summary.starts_with("results/features/S000.txt "),
        "{summary}"
    );

    // Nothing changed: nothing runs.
    assert!(ran(&project, &[]).is_empty());

    // A new sample file: its two stages and the aggregation.
    project.write("data/raw/S200.txt", "sample 200\n");
    let status = String::from_utf8_lossy(&project.pipe(&["status"]).stdout).into_owned();
    assert!(
        status.contains("clean@sample=S200") && status.contains("never run"),
        "{status}"
    );
    assert_eq!(
        ran(&project, &[]),
        names(&["clean@sample=S200", "featurize@sample=S200", "aggregate"])
    );
    assert!(project
        .read("results/summary.txt")
        .contains("results/features/S200.txt"));
    // The aggregation's command over 201 paths changed by one: said by
    // that path, not as two lines of kilobytes.
    let diff = String::from_utf8_lossy(&project.pipe(&["diff"]).stdout).into_owned();
    assert!(
        diff.contains("words removed: none, added: results/features/S200.txt"),
        "{diff}"
    );
    assert!(diff.lines().all(|line| line.len() < 200), "{diff}");

    // An edited sample: its stages and the aggregation.
    project.write("data/raw/S042.txt", "sample 42, again\n");
    assert_eq!(
        ran(&project, &[]),
        names(&["clean@sample=S042", "featurize@sample=S042", "aggregate"])
    );

    // A deleted sample: only the aggregation, which no longer reads it,
    // although its outputs are still in the work tree.
    std::fs::remove_file(project.path("data/raw/S007.txt")).unwrap();
    let status = String::from_utf8_lossy(&project.pipe(&["status"]).stdout).into_owned();
    assert!(
        status.contains("dependency `feats[results/features/S007.txt]` removed"),
        "{status}"
    );
    assert!(
        status.contains("2 outputs that earlier runs made and no stage declares now")
            && status.contains("results/clean/S007.txt")
            && status.contains("--remove-orphans"),
        "{status}"
    );
    assert_eq!(ran(&project, &[]), names(&["aggregate"]));
    let summary = project.read("results/summary.txt");
    assert!(!summary.contains("S007"), "{summary}");
    assert_eq!(summary.lines().count(), SAMPLES, "{summary}");
    assert!(project.exists("results/features/S007.txt"));

    // Removed on request, and said no more.
    let removed = project.pipe(&["run", "--remove-orphans"]);
    let said = String::from_utf8_lossy(&removed.stderr).into_owned();
    assert!(removed.status.success(), "{said}");
    assert!(said.contains("removed 2 outputs"), "{said}");
    assert!(!project.exists("results/features/S007.txt"));
    assert!(!project.exists("results/clean/S007.txt"));
    let status = String::from_utf8_lossy(&project.pipe(&["status"]).stdout).into_owned();
    assert!(!status.contains("earlier runs made"), "{status}");

    // The sample back: its results come from the cache.
    project.write("data/raw/S007.txt", "sample 7\n");
    let back = project.pipe(&["run"]);
    let text = String::from_utf8_lossy(&back.stderr).into_owned();
    assert!(back.status.success(), "{text}");
    assert!(
        text.contains("restored") && !text.contains("✓ ran      clean"),
        "{text}"
    );
}

#[test]
fn a_directory_that_other_stages_write_into_is_refused_pointing_at_every_expansion() {
    let project = sample_project();
    project.write(
        "pipe.yaml",
        &WORKFLOW.replace(
            r#"feats: "${stages.featurize@*.outs.feat}""#,
            "feats: results/features",
        ),
    );
    let output = project.pipe(&["validate"]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("error[folder-of-outputs]"), "{stderr}");
    assert!(stderr.contains("pipe.yaml:14:"), "{stderr}");
    assert!(
        stderr.contains("`${stages.featurize@*.outs.feat}`"),
        "{stderr}"
    );
}

#[test]
fn file_patterns_that_cannot_name_expansions_are_refused_where_written() {
    let project = TestProject::new();
    project.write("data/a b.txt", "x\n");
    project.write("data/ok.txt", "x\n");
    let cases = [
        // A value that cannot name a stage.
        (
            "data/{sample}.txt",
            "bad-matrix-value",
            "file `data/a b.txt`",
        ),
        // Nothing there.
        ("data/{sample}.csv", "empty-matrix", "no file matches"),
        // No key.
        ("data/ok.txt", "bad-file-pattern", "has no `{KEY}`"),
        ("data/**/{sample}.txt", "bad-file-pattern", "`**`"),
        ("../{sample}.txt", "bad-file-pattern", "`..`"),
    ];
    for (pattern, code, said) in cases {
        project.write(
            "pipe.yaml",
            &format!(
                "stages:\n  clean:\n    matrix: {{ files: \"{pattern}\" }}\n    run: echo ${{matrix.sample}}\n"
            ),
        );
        let output = project.pipe(&["validate"]);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(!output.status.success(), "{pattern}: {stderr}");
        assert!(
            stderr.contains(&format!("error[{code}]")),
            "{pattern}: {stderr}"
        );
        assert!(stderr.contains(said), "{pattern}: {stderr}");
        assert!(stderr.contains("pipe.yaml:3:"), "{pattern}: {stderr}");
    }

    // Several keys, and a key beside the pattern: a product of the files
    // and the values.
    project.write("data/b1/x.txt", "x\n");
    project.write("data/b2/y.txt", "y\n");
    project.write(
        "pipe.yaml",
        "stages:\n  clean:\n    matrix: { files: \"data/{batch}/{sample}.txt\", seed: [1, 2] }\n    run: echo ${matrix.batch}/${matrix.sample} ${matrix.seed} > out-${matrix.batch}-${matrix.sample}-${matrix.seed}\n    outs: [\"out-${matrix.batch}-${matrix.sample}-${matrix.seed}\"]\n",
    );
    let dag = project.pipe(&["dag", "-v"]);
    let listed = String::from_utf8_lossy(&dag.stdout).into_owned();
    assert!(
        dag.status.success(),
        "{}",
        String::from_utf8_lossy(&dag.stderr)
    );
    let run = project.pipe(&["run"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    for name in ["b1-x-1", "b1-x-2", "b2-y-1", "b2-y-2"] {
        assert!(project.exists(&format!("out-{name}")), "{name}: {listed}");
    }
    assert!(!project.exists("out-b1-y-1"));
}

#[test]
fn a_list_param_as_deps_or_outs_is_a_path_per_item_given_to_the_command_as_words() {
    let project = TestProject::new();
    project.write("in/x.txt", "x\n");
    project.write("in/y.txt", "y\n");
    project.write(
        "pipe.yaml",
        r#"params:
  inputs: [in/x.txt, in/y.txt]
  parts: [out/a.txt, out/b.txt]
stages:
  split:
    deps: { src: "${params.inputs}" }
    outs: { parts: "${params.parts}" }
    run: mkdir -p out && for f in ${outs.parts}; do cat ${deps.src} > $f; done
  join:
    deps: { parts: "${stages.split.outs.parts}" }
    outs: [out/joined.txt]
    run: [sh, -c, 'cat "$@" > out/joined.txt', join, "${deps.parts}"]
"#,
    );
    let run = project.pipe(&["run"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(project.read("out/a.txt"), "x\ny\n");
    assert_eq!(project.read("out/joined.txt"), "x\ny\nx\ny\n");
    // One item changed: both stages again, and only they.
    project.write("in/y.txt", "y2\n");
    assert_eq!(ran(&project, &[]), names(&["split", "join"]));
    assert_eq!(project.read("out/joined.txt"), "x\ny2\nx\ny2\n");
    let why = String::from_utf8_lossy(&project.pipe(&["why", "split"]).stdout).into_owned();
    assert!(!why.contains("in/x.txt in/y.txt"), "{why}");
}
