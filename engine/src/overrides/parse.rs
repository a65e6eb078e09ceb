//! `-S [+|++]key.path=value` read into a [`ParamOverride`], once, where
//! the command line is read: a malformed one is a usage error there.

use super::sweep_forms::{hydra_form, split_top_level};
use super::value::{OverrideMode, OverrideValue, ParamOverride, ParamPath, ParamValue};
use crate::project_files::source::Sources;
use crate::project_files::yaml::{self, Node, NodeValue};
use crate::{NotYaml, UsageError};

impl ParamOverride {
    /// One `-S` argument of a plain run: its value is one YAML value
    /// (`1e-4`, `bf16-mixed`, `'[a, b]'`).
    pub fn parse(argument: &str) -> Result<ParamOverride, UsageError> {
        let (path, mode, text) = head(argument)?;
        let value = param_value(text).map_err(|not_yaml| not_yaml_error(argument, &not_yaml))?;
        Ok(ParamOverride {
            path,
            mode,
            value: OverrideValue::One(value),
        })
    }

    /// One `-S` argument of `pipe run -m`: its values comma-separated
    /// (commas inside `[...]`, `{...}` or quotes belong to a value), or
    /// one of Hydra's forms, `range(1,4)` and `choice(a,b)`.
    pub fn parse_swept(argument: &str) -> Result<ParamOverride, UsageError> {
        let (path, mode, text) = head(argument)?;
        let texts = match hydra_form(text) {
            Some(form) => form.map_err(|why| UsageError::BadSweep {
                argument: argument.to_string(),
                why,
            })?,
            None => split_top_level(text),
        };
        if texts.iter().any(|text| text.trim().is_empty()) {
            return Err(UsageError::BadSweep {
                argument: argument.to_string(),
                why: "an empty value between commas".to_string(),
            });
        }
        let mut values = texts
            .iter()
            .map(|text| param_value(text.trim()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|not_yaml| not_yaml_error(argument, &not_yaml))?;
        let value = match values.len() {
            1 => OverrideValue::One(values.remove(0)),
            _ => OverrideValue::Sweep(values),
        };
        Ok(ParamOverride { path, mode, value })
    }

    /// A setting read back from the record of a one-run sweep: a plain
    /// value listing several (as a record written before settings were
    /// data holds them, `lr=1,2`) is the sweep's values.
    pub(crate) fn in_sweep_record(self) -> Result<ParamOverride, UsageError> {
        match &self.value {
            OverrideValue::One(ParamValue::Plain(_)) => {
                ParamOverride::parse_swept(&self.to_string())
            }
            _ => Ok(self),
        }
    }
}

/// The value `text` stands for in `-S key=TEXT`, as JSON: what `pipe
/// compare --where key=TEXT` matches, so `--where seed=0x10` finds the run
/// made with `-S seed=0x10`. An error says why the text is not YAML.
pub fn override_value(text: &str) -> Result<serde_json::Value, NotYaml> {
    param_value(text).map(|value| value.to_json())
}

/// The path and mode of `[+|++]key.path=value`, and the value's text.
fn head(argument: &str) -> Result<(ParamPath, OverrideMode, &str), UsageError> {
    let (mode, body) = if let Some(rest) = argument.strip_prefix("++") {
        (OverrideMode::Set, rest)
    } else if let Some(rest) = argument.strip_prefix('+') {
        (OverrideMode::Add, rest)
    } else {
        (OverrideMode::Replace, argument)
    };
    let Some((path, text)) = body.split_once('=') else {
        return Err(UsageError::BadOverride {
            argument: argument.to_string(),
            problem: "expected `key.path=value`".to_string(),
            hint: format!("write e.g. `-S {argument}=VALUE`; nested params are joined with dots: `-S train.lr=1e-4`"),
        });
    };
    let path = path.trim();
    let keys = path.split('.').map(str::to_string).collect();
    let Some(path) = ParamPath::new(keys) else {
        return Err(UsageError::BadOverride {
            argument: argument.to_string(),
            problem: format!("`{path}` is not a param path"),
            hint: "name the param with its dotted path, e.g. `-S train.lr=1e-4`; `+` adds a new one: `-S +train.warmup=100`".to_string(),
        });
    };
    Ok((path, mode, text))
}

fn not_yaml_error(argument: &str, not_yaml: &NotYaml) -> UsageError {
    UsageError::BadOverride {
        argument: argument.to_string(),
        problem: format!("the value is not valid YAML: {not_yaml}"),
        hint: "quote the value for the shell, e.g. -S 'tags=[a, b]', or pass plain text without brackets".to_string(),
    }
}

/// Plain text is a YAML plain scalar (`1e-4`, `true`, `bf16-mixed`);
/// text starting with a bracket or quote is parsed as YAML, so lists and
/// quoted strings can be passed too.
fn param_value(text: &str) -> Result<ParamValue, NotYaml> {
    let trimmed = text.trim();
    if !trimmed.starts_with(['[', '{', '"', '\'']) {
        return Ok(ParamValue::Plain(trimmed.to_string()));
    }
    let mut sources = Sources::default();
    let file = sources.add(None, text.to_string());
    match yaml::parse(&sources, file) {
        Ok(Some(node)) => Ok(from_node(&node)),
        Ok(None) => Ok(ParamValue::Plain(String::new())),
        Err(diagnostics) => Err(NotYaml {
            problem: diagnostics
                .first()
                .map(|diagnostic| {
                    diagnostic
                        .message
                        .trim_start_matches("invalid YAML: ")
                        .to_string()
                })
                .unwrap_or_default(),
        }),
    }
}

fn from_node(node: &Node) -> ParamValue {
    match &node.value {
        NodeValue::Scalar(scalar) if scalar.plain => ParamValue::Plain(scalar.text.clone()),
        NodeValue::Scalar(scalar) => ParamValue::Quoted(scalar.text.clone()),
        NodeValue::Seq(items) => ParamValue::List(items.iter().map(from_node).collect()),
        NodeValue::Map(entries) => ParamValue::Map(
            entries
                .iter()
                .map(|entry| (entry.key.clone(), from_node(&entry.value)))
                .collect(),
        ),
    }
}
