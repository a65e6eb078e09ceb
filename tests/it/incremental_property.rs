//! Property: after any sequence of edits, an incremental run leaves the
//! workspace exactly as a clean run of the same files does (buck2's
//! fuzzy DICE test, through the real binary).

use std::collections::BTreeMap;

use pipe_test_support::TestProject;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Stage {
    upstream: Vec<usize>,
    inputs: Vec<usize>,
    salt: u8,
}

#[derive(Debug, Clone)]
enum Edit {
    Input { file: usize, text: String },
    Param { stage: usize, value: u8 },
    Command { stage: usize, salt: u8 },
    DeleteOutput { stage: usize },
}

const INPUTS: usize = 3;

fn pipeline(stages: &[Stage], params: &[u8]) -> String {
    let mut text = String::from("params:\n");
    for (index, value) in params.iter().enumerate() {
        text.push_str(&format!("  p{index}: {value}\n"));
    }
    text.push_str("stages:\n");
    for (index, stage) in stages.iter().enumerate() {
        let mut deps = Vec::new();
        for &up in &stage.upstream {
            deps.push(format!("${{stages.s{up}.outs.out}}"));
        }
        for &input in &stage.inputs {
            deps.push(format!("in{input}.txt"));
        }
        // Output depends on every input's content, the param and the salt,
        // but only on the salt modulo 2: salt changes that keep the parity
        // reproduce the same bytes and exercise early cutoff.
        let run = format!(
            "{{ echo s{index} ${{params.p{index}}} $(( {} % 2 )); cat /dev/null {}; }} | sha256sum > out/s{index}.txt",
            stage.salt,
            deps.join(" ")
        );
        text.push_str(&format!("  s{index}:\n    run: mkdir -p out && {run}\n"));
        if !deps.is_empty() {
            text.push_str("    deps:\n");
            for dep in &deps {
                text.push_str(&format!("      - \"{dep}\"\n"));
            }
        }
        text.push_str(&format!("    outs: {{ out: out/s{index}.txt }}\n"));
    }
    text
}

fn stages_strategy() -> impl Strategy<Value = Vec<Stage>> {
    (2usize..7).prop_flat_map(|count| {
        (0..count)
            .map(|index| {
                (
                    proptest::sample::subsequence((0..index).collect::<Vec<_>>(), 0..=index.min(2)),
                    proptest::sample::subsequence((0..INPUTS).collect::<Vec<_>>(), 0..=2),
                    any::<u8>(),
                )
                    .prop_map(|(upstream, inputs, salt)| Stage {
                        upstream,
                        inputs,
                        salt,
                    })
            })
            .collect::<Vec<_>>()
    })
}

fn edit_strategy() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0..INPUTS, "[a-c]{0,3}").prop_map(|(file, text)| Edit::Input { file, text }),
        (0usize..7, 0u8..3).prop_map(|(stage, value)| Edit::Param { stage, value }),
        (0usize..7, any::<u8>()).prop_map(|(stage, salt)| Edit::Command { stage, salt }),
        (0usize..7).prop_map(|stage| Edit::DeleteOutput { stage }),
    ]
}

fn outputs(project: &TestProject, count: usize) -> BTreeMap<String, String> {
    (0..count)
        .map(|index| {
            (
                format!("s{index}"),
                project.read(&format!("out/s{index}.txt")),
            )
        })
        .collect()
}

fn write_state(project: &TestProject, stages: &[Stage], params: &[u8], inputs: &[String]) {
    project.write("pipe.yaml", &pipeline(stages, params));
    for (index, text) in inputs.iter().enumerate() {
        project.write(&format!("in{index}.txt"), text);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, max_shrink_iters: 20, ..ProptestConfig::default() })]

    #[test]
    fn incremental_equals_clean(mut stages in stages_strategy(), edits in proptest::collection::vec(edit_strategy(), 1..5)) {
        let count = stages.len();
        let mut params = vec![0u8; count];
        let mut inputs: Vec<String> = (0..INPUTS).map(|i| format!("input {i}\n")).collect();
        let incremental = TestProject::new();
        write_state(&incremental, &stages, &params, &inputs);
        incremental.run_ok(&[]);
        for edit in edits {
            match edit {
                Edit::Input { file, text } => inputs[file] = text,
                Edit::Param { stage, value } => params[stage % count] = value,
                Edit::Command { stage, salt } => stages[stage % count].salt = salt,
                Edit::DeleteOutput { stage } => {
                    let _ = std::fs::remove_file(incremental.path(&format!("out/s{}.txt", stage % count)));
                }
            }
            write_state(&incremental, &stages, &params, &inputs);
            incremental.run_ok(&[]);
            let clean = TestProject::new();
            write_state(&clean, &stages, &params, &inputs);
            clean.run_ok(&[]);
            prop_assert_eq!(outputs(&incremental, count), outputs(&clean, count));
        }
    }
}
