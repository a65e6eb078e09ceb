//! Rules between a stage's params that its catalog entry declares, so the
//! engine checks them when the pipeline loads (`pipe validate`,
//! `--dry-run`, `status`), located at the param, instead of the stage
//! finding them when it runs. The stage keeps its own check as well: a
//! worker is also invoked by hand, and a catalog from an older worker may
//! lack the rule.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::excerpt::excerpt;

/// How close a sum of fractions must come to its whole: fractions written
/// in decimal (0.7 + 0.2 + 0.1) do not add up exactly in binary.
const SUM_TOLERANCE: f64 = 1e-6;

/// What is wrong with one param, for the engine to locate at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamProblem {
    pub param: String,
    pub message: String,
    pub hint: String,
}

/// One rule between params, checked after each param's own type and range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum ParamRule {
    /// The sizes of the parts of one whole (`data/split`'s train, val and
    /// test): each a count (a whole number) or a fraction, an unset one
    /// 0; all counts or all fractions; fractions sum to `whole`; not all 0.
    Parts { params: Vec<String>, whole: f64 },
    /// When `param` is one of `is`, `then` must be one of `must_be`
    /// (`strategy: single` trains on one device). `because` says why, as
    /// the stage would; `hint` how to fix it.
    When {
        param: String,
        is: Vec<Value>,
        then: String,
        must_be: Vec<Value>,
        because: String,
        hint: String,
    },
}

/// The problems of `resolved` (a stage's params with defaults filled in)
/// under `rules`, one per broken rule.
pub fn check_rules(rules: &[ParamRule], resolved: &Map<String, Value>) -> Vec<ParamProblem> {
    rules
        .iter()
        .filter_map(|rule| match rule {
            ParamRule::Parts { params, whole } => parts_problem(params, *whole, resolved),
            ParamRule::When {
                param,
                is,
                then,
                must_be,
                because,
                hint,
            } => {
                let value = resolved.get(param).unwrap_or(&Value::Null);
                let other = resolved.get(then).unwrap_or(&Value::Null);
                (is.iter().any(|each| same(each, value))
                    && !must_be.iter().any(|each| same(each, other)))
                .then(|| ParamProblem {
                    param: then.clone(),
                    message: format!(
                        "param `{then}` is {}, but {because}",
                        excerpt(&other.to_string())
                    ),
                    hint: hint.clone(),
                })
            }
        })
        .collect()
}

/// Equal as values: `1` and `1.0` are one number.
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn parts_problem(
    params: &[String],
    whole: f64,
    resolved: &Map<String, Value>,
) -> Option<ParamProblem> {
    let values: Vec<(&String, &Value)> = params
        .iter()
        .map(|name| (name, resolved.get(name).unwrap_or(&Value::Null)))
        .collect();
    let first = params.first()?;
    let problem = |param: &str, message: String, hint: String| ParamProblem {
        param: param.to_string(),
        message,
        hint,
    };
    let hint = || {
        format!(
            "give all of {} as counts, or all as fractions that sum to {whole}",
            params.join(", ")
        )
    };
    if values.iter().all(|(_, value)| value.is_null()) {
        return Some(problem(
            first,
            format!("none of {} is set", params.join(", ")),
            hint(),
        ));
    }
    let set: Vec<&(&String, &Value)> = values
        .iter()
        .filter(|(_, value)| !value.is_null())
        .collect();
    if set.iter().all(|(_, value)| value.is_u64()) {
        if set.iter().all(|(_, value)| value.as_u64() == Some(0)) {
            return Some(problem(
                set[0].0,
                format!(
                    "every one of {} is 0, so every part would be empty",
                    params.join(", ")
                ),
                hint(),
            ));
        }
        return None;
    }
    if let Some((name, value)) = values
        .iter()
        .find(|(_, value)| value.is_u64() && value.as_u64() != Some(0))
    {
        return Some(problem(
            name,
            format!(
                "param `{name}` is a count ({value}) while another of {} is a fraction",
                params.join(", ")
            ),
            hint(),
        ));
    }
    let sum: f64 = values.iter().filter_map(|(_, value)| value.as_f64()).sum();
    if (sum - whole).abs() <= SUM_TOLERANCE {
        return None;
    }
    let each = values
        .iter()
        .map(|(name, value)| format!("{name} {}", value.as_f64().unwrap_or(0.0)))
        .collect::<Vec<_>>()
        .join(", ");
    Some(problem(
        first,
        format!(
            "the fractions {} sum to {}, not {whole} ({each})",
            params.join(" + "),
            round(sum)
        ),
        hint(),
    ))
}

/// A sum as a person reads it: 0.75, not 0.7500000000000001.
fn round(number: f64) -> f64 {
    (number * 1e9).round() / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parts(values: Value) -> Vec<String> {
        let rules = [ParamRule::Parts {
            params: vec!["train".into(), "val".into(), "test".into()],
            whole: 1.0,
        }];
        check_rules(&rules, values.as_object().unwrap())
            .into_iter()
            .map(|problem| format!("{}: {}", problem.param, problem.message))
            .collect()
    }

    #[test]
    fn parts_take_counts_or_fractions_that_make_the_whole() {
        assert!(parts(json!({"train": 35000, "val": 5000, "test": null})).is_empty());
        assert!(parts(json!({"train": 0.7, "val": 0.2, "test": 0.1})).is_empty());
        assert!(parts(json!({"train": 0.9, "val": 0.1, "test": 0})).is_empty());
        assert_eq!(
            parts(json!({"train": 0.7, "val": 0.02, "test": 0.03})),
            ["train: the fractions train + val + test sum to 0.75, not 1 (train 0.7, val 0.02, test 0.03)"]
        );
        assert_eq!(
            parts(json!({"train": 0.7, "val": 500, "test": 0.1})),
            ["val: param `val` is a count (500) while another of train, val, test is a fraction"]
        );
        assert_eq!(
            parts(json!({"train": null, "val": null, "test": null})),
            ["train: none of train, val, test is set"]
        );
        assert_eq!(
            parts(json!({"train": null, "val": 0, "test": 0})),
            ["val: every one of train, val, test is 0, so every part would be empty"]
        );
    }

    #[test]
    fn a_when_rule_names_the_dependent_param_and_reads_1_as_1_0() {
        let rules = [ParamRule::When {
            param: "strategy".into(),
            is: vec![json!("single")],
            then: "devices".into(),
            must_be: vec![json!(1)],
            because: "strategy `single` trains on one device".into(),
            hint: "use `strategy: ddp`".into(),
        }];
        let check = |values: Value| check_rules(&rules, values.as_object().unwrap());
        assert!(check(json!({"strategy": "single", "devices": 1.0})).is_empty());
        assert!(check(json!({"strategy": "ddp", "devices": 2})).is_empty());
        let problems = check(json!({"strategy": "single", "devices": 2}));
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].param, "devices");
        assert_eq!(
            problems[0].message,
            "param `devices` is 2, but strategy `single` trains on one device"
        );
    }

    #[test]
    fn rules_survive_json_as_a_worker_describes_them() {
        let rule: ParamRule = serde_json::from_value(json!({
            "rule": "parts", "params": ["a", "b"], "whole": 1.0
        }))
        .unwrap();
        assert_eq!(
            rule,
            ParamRule::Parts {
                params: vec!["a".into(), "b".into()],
                whole: 1.0
            }
        );
        assert!(serde_json::from_value::<ParamRule>(json!({"rule": "nonsense"})).is_err());
    }
}
