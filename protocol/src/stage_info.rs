//! What a worker says about each stage it offers (`WORKER describe`), and
//! the checks of the params a pipeline gives it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::excerpt::excerpt;
use crate::param_rules::{check_rules, ParamProblem, ParamRule};
use crate::record;

/// What a worker can run: the catalog entry of one stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageInfo {
    /// `text/tokenize`.
    pub name: String,
    /// The major version users write after `@`.
    pub version: u32,
    /// Bumped by the stage whenever its results would change for the same
    /// inputs; part of the stage key. Rebuilding the worker does not change it.
    pub implementation: u32,
    pub summary: String,
    pub params: Vec<ParamSpec>,
    pub outputs: Vec<OutputSpec>,
    /// Every key of the `metrics.json` the stage writes in its output
    /// directory, as the run's metrics hold them: flattened, nested objects
    /// joined with `.` down to a scalar, an array or an empty object
    /// (`memory.params_bytes`). A segment in angle brackets stands for any
    /// one segment, for objects whose keys depend on the run: the epochs of
    /// `epochs.<n>.val_acc`, the classes of `per_class.<class>.f1`. The
    /// stages' tests hold a real run's file to exactly this list.
    #[serde(default)]
    pub metrics: Vec<String>,
    /// The integer param that says on how many devices the stage runs
    /// (`devices` of `train/classifier`). When a stage sets
    /// `resources.gpus`, the engine requires this param to equal it, so the
    /// GPUs it hands out and those the stage uses cannot disagree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices_param: Option<String>,
    /// The integer param that says on how many nodes the stage's replicas
    /// run (`num_nodes` of `train/classifier`, as Lightning's
    /// `Trainer(num_nodes=)`). It is in the key, since the replicas' count
    /// changes the global batch; the engine requires it to equal
    /// `resources.nodes`, which is what Slurm is asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_param: Option<String>,
    /// The stage reports on the run it is part of (`report/html`): the
    /// engine runs it after every other stage of the pipeline and hands it
    /// a [`RunContext`]. Its key covers that context (the results it
    /// reports on, byte for byte), so it reruns only when they change.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reads_run: bool,
    /// What its params and metrics mean to a comparison of runs: which
    /// param is the seed, which the precision, whether it makes data, and
    /// which metrics are detail.
    #[serde(default, skip_serializing_if = "record::StageRoles::is_empty")]
    pub roles: record::StageRoles,
    /// Rules between params (`data/split`'s sizes sum to 1), checked
    /// when the pipeline loads, after each param's own type and range.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<ParamRule>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamSpec {
    pub name: String,
    pub kind: ParamKind,
    /// `None` (no `default` key in JSON): required. `Some(Value::Null)`
    /// (`"default": null`): optional and unset unless given.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub default: Option<Value>,
    pub doc: String,
    /// For `choice`: the allowed values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    /// When `with:` leaves this param unset, the engine fills it from the
    /// pipeline param of this name (`seed`), if the pipeline has one, so the
    /// value lands in the stage's key like any other param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_param: Option<String>,
    /// For `integer` and `number`: the smallest value accepted. Checked with
    /// the types, so a value out of range is refused before anything runs,
    /// at its place in the pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<f64>,
    /// For `integer` and `number`: the largest value accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<f64>,
    /// `minimum` itself is refused too: the value must be above it (a
    /// learning rate of 0 trains nothing).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclusive_minimum: bool,
}

impl ParamSpec {
    /// A param of `kind`: `default` `None` is required, `Some(Value::Null)`
    /// optional and unset unless given, `Some(value)` that value when not
    /// given.
    pub fn new(name: &str, kind: ParamKind, default: Option<Value>, doc: &str) -> Self {
        ParamSpec {
            name: name.into(),
            kind,
            default,
            doc: doc.into(),
            choices: Vec::new(),
            pipeline_param: None,
            minimum: None,
            maximum: None,
            exclusive_minimum: false,
        }
    }

    /// One of `choices`, the first by default.
    pub fn choice(name: &str, choices: &[&str], doc: &str) -> Self {
        ParamSpec {
            choices: choices.iter().map(|choice| choice.to_string()).collect(),
            ..ParamSpec::new(
                name,
                ParamKind::Choice,
                choices.first().map(|first| Value::from(*first)),
                doc,
            )
        }
    }

    /// An optional non-negative `seed` that falls back to the pipeline's
    /// `seed` param. The engine fills that fallback into `with:` before
    /// hashing, so a stage never reads a seed its key does not cover.
    pub fn seed(doc: &str) -> Self {
        ParamSpec {
            pipeline_param: Some("seed".into()),
            ..ParamSpec::new("seed", ParamKind::Integer, Some(Value::Null), doc).at_least(0.0)
        }
    }

    /// The same param, refusing values below `minimum`.
    pub fn at_least(mut self, minimum: f64) -> Self {
        self.minimum = Some(minimum);
        self
    }

    /// The same param, refusing values above `maximum`.
    pub fn at_most(mut self, maximum: f64) -> Self {
        self.maximum = Some(maximum);
        self
    }

    /// The same param, refusing `minimum` and values below it.
    pub fn above(mut self, minimum: f64) -> Self {
        self.minimum = Some(minimum);
        self.exclusive_minimum = true;
        self
    }
}

/// A `default` key that is present is `Some`, even when it is `null`.
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamKind {
    String,
    Integer,
    Number,
    Bool,
    /// One of `choices`.
    Choice,
    /// A file or directory the stage reads: hashed into the key like a dep,
    /// passed as an absolute path.
    Path,
    /// A list of strings.
    StringList,
    /// Any JSON value (mappings such as label maps).
    Any,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputSpec {
    pub name: String,
    pub kind: OutputKind,
    pub doc: String,
    /// The file in this output a person opens (a report's `index.html`):
    /// `pipe run` names it when the stage is done, `pipe show` with the
    /// run. The engine knows a report by this, not by the stage's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    File,
    Dir,
}

/// Checks `params` against `info`: unknown names, missing required ones,
/// wrong types. Returns the params with defaults filled in, or one message
/// per problem as (param name, message, hint).
pub fn check_params(
    info: &StageInfo,
    params: &serde_json::Map<String, Value>,
) -> Result<serde_json::Map<String, Value>, Vec<ParamProblem>> {
    let mut problems = Vec::new();
    let known: Vec<&str> = info.params.iter().map(|spec| spec.name.as_str()).collect();
    for name in params.keys() {
        if !known.contains(&name.as_str()) {
            problems.push(ParamProblem {
                param: name.clone(),
                message: format!("`{}@{}` has no param `{name}`", info.name, info.version),
                hint: format!("its params: {}", known.join(", ")),
            });
        }
    }
    let mut resolved = serde_json::Map::new();
    for spec in &info.params {
        let value = match (params.get(&spec.name), &spec.default) {
            (Some(value), _) => value.clone(),
            (None, Some(default)) => default.clone(),
            (None, None) => {
                problems.push(ParamProblem {
                    param: spec.name.clone(),
                    message: format!(
                        "`{}@{}` needs param `{}`",
                        info.name, info.version, spec.name
                    ),
                    hint: format!("add `{}: ...` under `with:` ({})", spec.name, spec.doc),
                });
                continue;
            }
        };
        if value.is_null() && spec.default.as_ref().is_some_and(Value::is_null) {
            resolved.insert(spec.name.clone(), value);
            continue;
        }
        if let Some(message) = type_problem(spec, &value).or_else(|| range_problem(spec, &value)) {
            problems.push(ParamProblem {
                param: spec.name.clone(),
                message,
                hint: spec.doc.clone(),
            });
            continue;
        }
        resolved.insert(spec.name.clone(), value);
    }
    if problems.is_empty() {
        problems = check_rules(&info.rules, &resolved);
    }
    if problems.is_empty() {
        Ok(resolved)
    } else {
        Err(problems)
    }
}

/// YAML spells infinities and NaN as `.inf`, `-.inf`, `.nan` (in three
/// cases); the engine passes them on as that text, since JSON has no such
/// numbers.
fn is_yaml_non_finite(text: &str) -> bool {
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    matches!(unsigned, ".inf" | ".Inf" | ".INF")
        || matches!(text, ".nan" | ".NaN" | ".NAN")
        // `1e999` overflows to an infinity and arrives as its text too.
        || text.parse::<f64>().is_ok_and(|number| !number.is_finite())
}

/// The message for a value of the wrong type, if it is one.
fn type_problem(spec: &ParamSpec, value: &Value) -> Option<String> {
    let numeric = matches!(spec.kind, ParamKind::Integer | ParamKind::Number);
    if let Some(text) = value
        .as_str()
        .filter(|text| numeric && is_yaml_non_finite(text))
    {
        let expected = if spec.kind == ParamKind::Integer {
            "a whole number"
        } else {
            "a finite number"
        };
        return Some(format!(
            "param `{}` must be {expected}, not `{text}`: params reach a stage as JSON, which has no \
             infinity or NaN",
            spec.name
        ));
    }
    let expected = expected_type(spec, value)?;
    Some(format!(
        "param `{}` must be {expected}, not `{}`",
        spec.name,
        excerpt(&value.to_string())
    ))
}

fn range_problem(spec: &ParamSpec, value: &Value) -> Option<String> {
    let number = value.as_f64()?;
    let shown = excerpt(&value.to_string());
    let whole = |bound: f64| {
        if spec.kind == ParamKind::Integer {
            format!("{}", bound as i64)
        } else {
            format!("{bound}")
        }
    };
    let below = |minimum: f64| {
        if spec.exclusive_minimum {
            number <= minimum
        } else {
            number < minimum
        }
    };
    let lower = |minimum: f64| {
        if spec.exclusive_minimum {
            format!("above {}", whole(minimum))
        } else {
            format!("at least {}", whole(minimum))
        }
    };
    match (spec.minimum, spec.maximum) {
        (Some(minimum), Some(maximum)) if below(minimum) || number > maximum => {
            Some(if spec.exclusive_minimum {
                format!(
                    "param `{}` must be {} and at most {}, not {shown}",
                    spec.name,
                    lower(minimum),
                    whole(maximum)
                )
            } else {
                format!(
                    "param `{}` must be between {} and {}, not {shown}",
                    spec.name,
                    whole(minimum),
                    whole(maximum)
                )
            })
        }
        (Some(minimum), None) if below(minimum) => Some(format!(
            "param `{}` must be {}, not {shown}",
            spec.name,
            lower(minimum)
        )),
        (None, Some(maximum)) if number > maximum => Some(format!(
            "param `{}` must be at most {}, not {shown}",
            spec.name,
            whole(maximum)
        )),
        _ => None,
    }
}

fn expected_type(spec: &ParamSpec, value: &Value) -> Option<String> {
    let ok = match spec.kind {
        ParamKind::String | ParamKind::Path => value.is_string(),
        ParamKind::Integer => value.is_i64() || value.is_u64(),
        ParamKind::Number => value.is_number(),
        ParamKind::Bool => value.is_boolean(),
        ParamKind::Choice => value
            .as_str()
            .is_some_and(|text| spec.choices.iter().any(|c| c == text)),
        ParamKind::StringList => value
            .as_array()
            .is_some_and(|items| items.iter().all(Value::is_string)),
        ParamKind::Any => true,
    };
    if ok {
        return None;
    }
    Some(match spec.kind {
        ParamKind::String => "text".to_string(),
        ParamKind::Path => "a path".to_string(),
        ParamKind::Integer => "a whole number".to_string(),
        ParamKind::Number => "a number".to_string(),
        ParamKind::Bool => "true or false".to_string(),
        ParamKind::Choice => format!("one of {}", spec.choices.join(", ")),
        ParamKind::StringList => "a list of text values".to_string(),
        ParamKind::Any => "a value".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_default_survives_json_and_a_missing_one_means_required() {
        let optional: ParamSpec = serde_json::from_str(
            r#"{"name": "md5", "kind": "string", "default": null, "doc": ""}"#,
        )
        .unwrap();
        assert_eq!(optional.default, Some(Value::Null));
        let required: ParamSpec =
            serde_json::from_str(r#"{"name": "url", "kind": "string", "doc": ""}"#).unwrap();
        assert_eq!(required.default, None);
        let round_trip: ParamSpec =
            serde_json::from_str(&serde_json::to_string(&optional).unwrap()).unwrap();
        assert_eq!(round_trip, optional);
    }

    fn stage(params: Vec<ParamSpec>) -> StageInfo {
        StageInfo {
            name: "t/t".into(),
            version: 1,
            implementation: 1,
            summary: String::new(),
            params,
            outputs: vec![],
            metrics: vec![],
            devices_param: None,
            nodes_param: None,
            reads_run: false,
            roles: Default::default(),
            rules: Vec::new(),
        }
    }

    fn spec(name: &str, kind: ParamKind) -> ParamSpec {
        ParamSpec {
            name: name.into(),
            kind,
            default: Some(Value::Null),
            doc: "what fits".into(),
            choices: vec![],
            pipeline_param: None,
            minimum: None,
            maximum: None,
            exclusive_minimum: false,
        }
    }

    fn problems(info: &StageInfo, params: Value) -> Vec<String> {
        match check_params(info, params.as_object().unwrap()) {
            Ok(_) => vec![],
            Err(problems) => problems.into_iter().map(|p| p.message).collect(),
        }
    }

    #[test]
    fn values_outside_the_range_are_refused_saying_the_range() {
        let info = stage(vec![
            spec("length", ParamKind::Integer).at_least(1.0),
            spec("share", ParamKind::Number).at_least(0.0).at_most(1.0),
        ]);
        assert_eq!(
            problems(&info, serde_json::json!({"length": -5, "share": 1.5})),
            [
                "param `length` must be at least 1, not -5",
                "param `share` must be between 0 and 1, not 1.5"
            ]
        );
        assert!(problems(&info, serde_json::json!({"length": 1, "share": 0})).is_empty());
        assert!(problems(&info, serde_json::json!({})).is_empty());
    }

    #[test]
    fn an_excluded_minimum_refuses_the_bound_itself() {
        let info = stage(vec![
            spec("lr", ParamKind::Number).above(0.0).at_most(1.0),
            spec("clip", ParamKind::Number).above(0.0),
        ]);
        assert_eq!(
            problems(&info, serde_json::json!({"lr": 0, "clip": 0.0})),
            [
                "param `lr` must be above 0 and at most 1, not 0",
                "param `clip` must be above 0, not 0.0"
            ]
        );
        assert!(problems(&info, serde_json::json!({"lr": 1e-9, "clip": 1})).is_empty());
    }

    #[test]
    fn yaml_infinities_are_refused_as_not_finite() {
        let info = stage(vec![
            spec("norm", ParamKind::Number),
            spec("count", ParamKind::Integer),
        ]);
        assert_eq!(
            problems(&info, serde_json::json!({"norm": ".inf", "count": "-.Inf"})),
            [
                "param `norm` must be a finite number, not `.inf`: params reach a stage as JSON, which has no \
                 infinity or NaN",
                "param `count` must be a whole number, not `-.Inf`: params reach a stage as JSON, which has no \
                 infinity or NaN"
            ]
        );
        assert_eq!(
            problems(&info, serde_json::json!({"norm": "1e999"})).len(),
            1
        );
        assert_eq!(
            problems(&info, serde_json::json!({"norm": "fast"})),
            ["param `norm` must be a number, not `\"fast\"`"]
        );
    }

    #[test]
    fn excerpts_keep_short_text_and_cut_long_text_with_its_size() {
        assert_eq!(excerpt("short"), "short");
        let long = "é".repeat(100);
        assert_eq!(excerpt(&long), format!("{}… (200 bytes)", "é".repeat(80)));
    }
}
