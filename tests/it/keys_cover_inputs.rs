//! A worker receives nothing that its stage's key does not cover: every
//! param of every built-in stage the catalog lists, and the pipeline params
//! a stage falls back on (`seed`), change the key when they change. Checked
//! through the real `pipe` (`pipe stages --json`, `pipe why --json`).

use pipe_test_support::TestProject;
use serde_json::{json, Map, Value};

fn catalog(project: &TestProject) -> Vec<Value> {
    let output = project.pipe(&["stages", "--json"]);
    assert!(
        output.status.success(),
        "pipe stages --json failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stages: Value = serde_json::from_slice(&output.stdout).expect("catalog JSON");
    stages.as_array().expect("a list of stages").clone()
}

/// Two different valid values of a param, the second never the param's
/// default (so setting it always changes what the stage would use); the
/// first is what a required param gets. None when the kind has only one.
fn two_values(param: &Value) -> Option<(Value, Value)> {
    let default = param.get("default").filter(|value| !value.is_null());
    // Numbers inside the range the param declares, which the pipeline's
    // load holds it to.
    let low = param.get("minimum").and_then(Value::as_f64);
    let pair = match param["kind"].as_str().expect("kind") {
        "string" => (json!("a"), json!("b")),
        "integer" => {
            let first = low.map_or(1, |low| low.ceil().max(1.0) as i64);
            (json!(first), json!(first + 1))
        }
        "number" => (json!(0.5), json!(0.25)),
        "bool" => (json!(false), json!(true)),
        "choice" => {
            let choices = param["choices"].as_array().expect("choices");
            if choices.len() < 2 {
                return None;
            }
            (choices[0].clone(), choices[1].clone())
        }
        "path" => (json!("inputs/a.txt"), json!("inputs/b.txt")),
        "string_list" => (json!(["a"]), json!(["a", "b"])),
        "any" => (json!({"a": 1}), json!({"a": 2})),
        other => panic!("a param kind this test does not know: {other}"),
    };
    // The variant must differ from what the stage would use anyway.
    Some(match default {
        Some(default) if *default == pair.1 => (pair.1, pair.0),
        _ => pair,
    })
}

/// A value for each required param (one without a `default`), the least a
/// stage's `with:` must hold.
fn required_params(params: &[Value]) -> Map<String, Value> {
    params
        .iter()
        .filter(|param| param.get("default").is_none())
        .map(|param| {
            let (value, _) = two_values(param).expect("a required param has values");
            (param["name"].as_str().unwrap().to_string(), value)
        })
        .collect()
}

/// Whether `name` is one of the sizes of a `parts` rule of the stage.
fn is_part(info: &Value, name: &str) -> bool {
    rules(info)
        .iter()
        .filter(|rule| rule["rule"] == "parts")
        .any(|rule| {
            rule["params"]
                .as_array()
                .is_some_and(|params| params.iter().any(|p| p == name))
        })
}

fn rules(info: &Value) -> Vec<Value> {
    info["rules"].as_array().cloned().unwrap_or_default()
}

/// `with` made to keep the rules the catalog declares between the stage's
/// params, as a user must: a `parts` rule's first size a count when none
/// is set, and a `when` rule's condition turned off (its param set to
/// another of its choices) where `with` gives the dependent param a value
/// the rule refuses, or the dependent param given an allowed value where
/// only its default is refused.
fn within_rules(info: &Value, mut with: Map<String, Value>) -> Map<String, Value> {
    let params = info["params"].as_array().expect("params");
    let given = |with: &Map<String, Value>, name: &str| {
        with.get(name).cloned().or_else(|| {
            params
                .iter()
                .find(|param| param["name"] == name)
                .and_then(|param| param.get("default").cloned())
        })
    };
    for rule in rules(info) {
        match rule["rule"].as_str() {
            Some("parts") => {
                let sizes = rule["params"].as_array().expect("parts");
                if sizes
                    .iter()
                    .all(|size| with.get(size.as_str().unwrap()).is_none())
                {
                    with.insert(sizes[0].as_str().unwrap().to_string(), json!(1));
                }
            }
            Some("when") => {
                let (param, then) = (
                    rule["param"].as_str().unwrap(),
                    rule["then"].as_str().unwrap(),
                );
                let is = rule["is"].as_array().expect("is");
                let must_be = rule["must_be"].as_array().expect("must_be");
                let triggered = given(&with, param).is_some_and(|value| is.contains(&value));
                // The engine checks `then`'s default too (`fsdp_prefetch:
                // false` with no strategy given is refused).
                let refused = given(&with, then).is_some_and(|value| {
                    !must_be.iter().any(|allowed| {
                        allowed
                            .as_f64()
                            .zip(value.as_f64())
                            .map_or(*allowed == value, |(a, b)| a == b)
                    })
                });
                if triggered && refused && !with.contains_key(then) {
                    // Only the default is refused: give `then` a value the
                    // rule allows, so the trigger keeps the value under test.
                    with.insert(then.to_string(), must_be[0].clone());
                } else if triggered && refused {
                    let other = params
                        .iter()
                        .find(|spec| spec["name"] == param)
                        .and_then(|spec| spec["choices"].as_array())
                        .and_then(|choices| choices.iter().find(|choice| !is.contains(choice)))
                        .cloned()
                        .expect("a `when` rule's param has another choice");
                    with.insert(param.to_string(), other);
                }
            }
            other => panic!("a rule this test does not know: {other:?}"),
        }
    }
    with
}

fn pipeline(uses: &str, with: &Map<String, Value>, seed: u64, nodes: Option<u64>) -> String {
    let resources = nodes.map_or_else(String::new, |nodes| {
        format!("    resources: {{ nodes: {nodes} }}\n")
    });
    format!(
        "params:\n  seed: {seed}\nstages:\n  probe:\n    uses: {uses}\n    with: {}\n{resources}",
        Value::Object(with.clone())
    )
}

fn key(project: &TestProject, uses: &str, with: &Map<String, Value>, seed: u64) -> String {
    key_on(project, uses, with, seed, None)
}

/// The key of a stage whose `nodes_param` (`num_nodes`) must equal
/// `resources.nodes`: both are set alike, as a user must.
fn key_of(project: &TestProject, info: &Value, with: &Map<String, Value>, seed: u64) -> String {
    let uses = format!("{}@{}", info["name"].as_str().unwrap(), info["version"]);
    let nodes = info["nodes_param"]
        .as_str()
        .map(|name| with.get(name).and_then(Value::as_u64).unwrap_or(1));
    key_on(project, &uses, with, seed, nodes)
}

fn key_on(
    project: &TestProject,
    uses: &str,
    with: &Map<String, Value>,
    seed: u64,
    nodes: Option<u64>,
) -> String {
    project.write("pipe.yaml", &pipeline(uses, with, seed, nodes));
    let output = project.pipe(&["why", "probe", "--json"]);
    assert!(
        output.status.success(),
        "pipe why failed for {uses} with {with:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let why: Value = serde_json::from_slice(&output.stdout).expect("why JSON");
    why["key"]
        .as_str()
        .unwrap_or_else(|| panic!("no key for {uses} with {with:?}: {why}"))
        .to_string()
}

#[test]
fn every_param_of_every_builtin_stage_changes_its_key() {
    let project = TestProject::new();
    project.write("inputs/a.txt", "first input\n");
    project.write("inputs/b.txt", "second input\n");
    let stages = catalog(&project);
    assert!(
        stages.iter().any(|info| info["name"] == "data/split"),
        "the catalog lacks the data stages: {stages:?}"
    );
    let mut checked = 0;
    for info in &stages {
        let uses = format!("{}@{}", info["name"].as_str().unwrap(), info["version"]);
        let params = info["params"].as_array().expect("params");
        let base = within_rules(info, required_params(params));
        for param in params {
            let name = param["name"].as_str().unwrap();
            let Some((first, second)) = two_values(param) else {
                continue;
            };
            let mut variant = base.clone();
            let value = if is_part(info, name) {
                // A size of one whole: counts keep `parts` whatever the others.
                json!(if variant.get(name) == Some(&json!(1)) {
                    2
                } else {
                    1
                })
            } else if variant.get(name) == Some(&second) {
                first
            } else {
                second
            };
            variant.insert(name.to_string(), value.clone());
            // A value a `when` rule allows only with another param's value
            // (`devices: 2` needs a strategy other than `single`) is
            // compared with the base under that other value.
            let variant = within_rules(info, variant);
            let mut base = base.clone();
            for (other, value) in &variant {
                if other != name && base.get(other) != Some(value) {
                    base.insert(other.clone(), value.clone());
                }
            }
            let base_key = key_of(&project, info, &base, 1);
            let variant_key = key_of(&project, info, &variant, 1);
            assert_ne!(
                base_key, variant_key,
                "{uses}: setting `{name}: {value}` left the key unchanged, so a worker would read a value its key \
                 does not cover"
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} params were checked");
}

#[test]
fn a_pipeline_param_a_stage_falls_back_on_is_in_its_key() {
    let project = TestProject::new();
    project.write("inputs/a.txt", "first input\n");
    project.write("inputs/b.txt", "second input\n");
    let stages = catalog(&project);
    let mut checked = Vec::new();
    for info in &stages {
        let uses = format!("{}@{}", info["name"].as_str().unwrap(), info["version"]);
        let params = info["params"].as_array().expect("params");
        let base = within_rules(info, required_params(params));
        for param in params {
            let Some(source) = param.get("pipeline_param").and_then(Value::as_str) else {
                continue;
            };
            assert_eq!(source, "seed", "this test sets only the pipeline's seed");
            let name = param["name"].as_str().unwrap();
            assert_ne!(
                key(&project, &uses, &base, 1),
                key(&project, &uses, &base, 7),
                "{uses}: `{name}` unset falls back on `params.seed`, but changing it left the key unchanged"
            );
            let mut explicit = base.clone();
            explicit.insert(name.to_string(), json!(3));
            assert_eq!(
                key(&project, &uses, &explicit, 1),
                key(&project, &uses, &explicit, 7),
                "{uses}: with `{name}` set, the pipeline's seed is not used and must not rerun the stage"
            );
            checked.push(uses.clone());
        }
    }
    assert!(
        checked.iter().any(|uses| uses == "data/split@1"),
        "data/split@1 should fall back on the pipeline's seed: {checked:?}"
    );
}

/// The reproduction: `-S seed=7` after a run with seed 1 must rerun
/// the split and give a different one, and going back restores the first.
#[test]
fn changing_the_pipeline_seed_reruns_a_split_that_falls_back_on_it() {
    let project = TestProject::new();
    let rows: String = (0..200)
        .map(|id| format!("{{\"text\": \"row {id}\", \"label\": {}}}\n", id % 2))
        .collect();
    project.write("data.jsonl", &rows);
    project.write(
        "pipe.yaml",
        "params:\n  seed: 1\nstages:\n  split:\n    uses: data/split@1\n    with:\n      dataset: data.jsonl\n      \
         train: 100\n      val: 50\n      test: 50\n",
    );
    let train = ".pipe/out/pipe/split/dataset/train.jsonl";
    let first = project.run_ok(&[]);
    assert_eq!(first.status("split"), "ran");
    let seed_1 = project.read(train);

    let second = project.run_ok(&["-S", "seed=7"]);
    assert_eq!(
        second.status("split"),
        "ran",
        "a new pipeline seed must rerun the split"
    );
    let seed_7 = project.read(train);
    assert_ne!(seed_1, seed_7, "seed 7 gave the same split as seed 1");

    let third = project.run_ok(&["-S", "seed=1"]);
    assert_eq!(third.status("split"), "restored");
    assert_eq!(project.read(train), seed_1);

    let why = project.pipe(&["why", "split", "-S", "seed=7"]);
    let text = String::from_utf8_lossy(&why.stdout);
    assert!(text.contains("with.seed"), "why names the seed: {text}");
}
