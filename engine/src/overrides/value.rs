//! The types of a `-S` setting, how one is written back as the argument it
//! came from, and its stored form.

use std::borrow::Cow;
use std::fmt;

use pipe_protocol::redact::redact_text;
use serde::{Deserialize, Serialize};

use crate::project_files::yaml::{resolve_plain, Resolved};
use crate::project_files::yaml_text::yaml_quoted;

/// One `-S` setting: which param, what it may do to it, and the value.
/// Parsed once where the command line is read ([`ParamOverride::parse`]),
/// then carried, recorded and loaded again as this, never re-split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "StoredOverride")]
pub struct ParamOverride {
    pub path: ParamPath,
    pub mode: OverrideMode,
    pub value: OverrideValue,
}

/// A param's dotted path (`train.lr`) as its keys: none empty.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct ParamPath(Vec<String>);

/// What a setting may do to its path, in Hydra's grammar: `key=value`
/// replaces a param that exists, `+key=value` adds one that does not,
/// `++key=value` sets it either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverrideMode {
    Replace,
    Add,
    Set,
}

/// The value of a setting: one, or under `pipe run -m` the values a sweep
/// takes in turn (`-S lr=1e-4,3e-4`, `range(1,4)` expanded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OverrideValue {
    One(ParamValue),
    Sweep(Vec<ParamValue>),
}

/// A value as YAML data, each scalar kept as written, since what it means
/// is YAML's core schema's to say where it is used (`1e-4` a float,
/// `0x10` an int, `bf16-mixed` a string) and a command that reads the
/// param gets the text as written. Data only: nothing in it is evaluated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamValue {
    /// A plain scalar: `1e-4`, `true`, `a b`.
    Plain(String),
    /// A quoted scalar: a string whatever it reads like.
    Quoted(String),
    List(Vec<ParamValue>),
    /// Keys in the order written.
    Map(Vec<(String, ParamValue)>),
}

impl ParamPath {
    /// `keys`, none empty; `None` otherwise.
    pub fn new(keys: Vec<String>) -> Option<ParamPath> {
        (!keys.is_empty() && keys.iter().all(|key| !key.is_empty())).then_some(ParamPath(keys))
    }

    pub fn keys(&self) -> &[String] {
        &self.0
    }

    /// The dotted form, `train.lr`.
    pub fn dotted(&self) -> String {
        self.0.join(".")
    }
}

impl fmt::Display for ParamPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dotted())
    }
}

impl OverrideMode {
    /// The prefix it is written with.
    pub fn prefix(self) -> &'static str {
        match self {
            OverrideMode::Replace => "",
            OverrideMode::Add => "+",
            OverrideMode::Set => "++",
        }
    }
}

impl ParamOverride {
    /// The setting with credentials in its values masked (`-S
    /// url=https://user:pass@...`): as a record keeps it, since the
    /// database outlives the run and is shared.
    pub fn redacted(&self) -> ParamOverride {
        ParamOverride {
            value: match &self.value {
                OverrideValue::One(value) => OverrideValue::One(value.redacted()),
                OverrideValue::Sweep(values) => {
                    OverrideValue::Sweep(values.iter().map(ParamValue::redacted).collect())
                }
            },
            ..self.clone()
        }
    }

    /// The one value it sets; `None` for a sweep's several.
    pub fn one(&self) -> Option<&ParamValue> {
        match &self.value {
            OverrideValue::One(value) => Some(value),
            OverrideValue::Sweep(_) => None,
        }
    }

    /// Each value it takes: one, or a sweep's in order.
    pub fn values(&self) -> &[ParamValue] {
        match &self.value {
            OverrideValue::One(value) => std::slice::from_ref(value),
            OverrideValue::Sweep(values) => values,
        }
    }

    /// Its values as written, comma-separated (`1e-4,3e-4`).
    pub fn values_shown(&self) -> String {
        self.values()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The same setting with `value` alone.
    pub fn with_value(&self, value: ParamValue) -> ParamOverride {
        ParamOverride {
            path: self.path.clone(),
            mode: self.mode,
            value: OverrideValue::One(value),
        }
    }
}

/// `+train.lr=1e-4`: the argument it reads as, for messages, `pipe show`
/// and the record's JSON. A sweep's values are joined by commas.
impl fmt::Display for ParamOverride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}={}",
            self.mode.prefix(),
            self.path,
            self.values_shown()
        )
    }
}

impl ParamValue {
    /// What the value means as JSON: plain scalars by YAML's core schema.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            ParamValue::Plain(text) => plain_json(text),
            ParamValue::Quoted(text) => Value::String(text.clone()),
            ParamValue::List(items) => {
                Value::Array(items.iter().map(ParamValue::to_json).collect())
            }
            ParamValue::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(key, value)| (key.clone(), value.to_json()))
                    .collect(),
            ),
        }
    }

    /// A value recorded as JSON, as data again: strings quoted, so that
    /// each reads back as what it was.
    pub fn from_json(value: &serde_json::Value) -> ParamValue {
        use serde_json::Value;
        match value {
            Value::Null => ParamValue::Plain("null".to_string()),
            Value::Bool(value) => ParamValue::Plain(value.to_string()),
            Value::Number(number) => ParamValue::Plain(number.to_string()),
            Value::String(text) => ParamValue::Quoted(text.clone()),
            Value::Array(items) => {
                ParamValue::List(items.iter().map(ParamValue::from_json).collect())
            }
            Value::Object(fields) => ParamValue::Map(
                fields
                    .iter()
                    .map(|(key, value)| (key.clone(), ParamValue::from_json(value)))
                    .collect(),
            ),
        }
    }

    fn redacted(&self) -> ParamValue {
        let text = |text: &str| match redact_text(text) {
            Cow::Borrowed(_) => text.to_string(),
            Cow::Owned(masked) => masked,
        };
        match self {
            ParamValue::Plain(plain) => ParamValue::Plain(text(plain)),
            ParamValue::Quoted(quoted) => ParamValue::Quoted(text(quoted)),
            ParamValue::List(items) => {
                ParamValue::List(items.iter().map(ParamValue::redacted).collect())
            }
            ParamValue::Map(entries) => ParamValue::Map(
                entries
                    .iter()
                    .map(|(key, value)| (key.clone(), value.redacted()))
                    .collect(),
            ),
        }
    }
}

/// The value as YAML that reads back as the same data: a plain scalar as
/// written, a quoted one double-quoted, lists and mappings in flow style.
impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Plain(text) => f.write_str(text),
            ParamValue::Quoted(text) => f.write_str(&yaml_quoted(text)),
            ParamValue::List(items) => {
                f.write_str("[")?;
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            ParamValue::Map(entries) => {
                f.write_str("{")?;
                for (index, (key, value)) in entries.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    if plain_key(key) {
                        write!(f, "{key}: {value}")?;
                    } else {
                        write!(f, "{}: {value}", yaml_quoted(key))?;
                    }
                }
                f.write_str("}")
            }
        }
    }
}

/// A plain scalar as JSON, as YAML's core schema reads it; JSON has no
/// infinities or NaN, so they stay as the text written.
pub(crate) fn plain_json(text: &str) -> serde_json::Value {
    use serde_json::Value;
    match resolve_plain(text) {
        Resolved::Null => Value::Null,
        Resolved::Bool(value) => Value::Bool(value),
        Resolved::Int(value) => Value::from(value),
        Resolved::Float(value) => serde_json::Number::from_f64(value)
            .map_or_else(|| Value::String(text.to_string()), Value::Number),
        Resolved::Str => Value::String(text.to_string()),
    }
}

/// A key YAML reads back as the same string when written plain.
fn plain_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
        && !matches!(
            key.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "y" | "n"
        )
}

/// A setting as a record holds it: data, or, in a record written before
/// settings were data, the argument as given.
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredOverride {
    Data {
        path: Vec<String>,
        mode: OverrideMode,
        value: OverrideValue,
    },
    Written(String),
}

/// Why a stored setting cannot be read back.
#[derive(Debug)]
pub struct BadStoredOverride(String);

impl fmt::Display for BadStoredOverride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<StoredOverride> for ParamOverride {
    type Error = BadStoredOverride;

    /// A written argument is read as a plain run's and, failing that, as
    /// a sweep's (`tags=[a],[b]`); [`ParamOverride::in_sweep_record`]
    /// then reads a sweep record's plain values as lists.
    fn try_from(stored: StoredOverride) -> Result<Self, Self::Error> {
        match stored {
            StoredOverride::Data { path, mode, value } => Ok(ParamOverride {
                path: ParamPath::new(path)
                    .ok_or_else(|| BadStoredOverride("a param path with an empty key".into()))?,
                mode,
                value,
            }),
            StoredOverride::Written(argument) => ParamOverride::parse(&argument)
                .or_else(|_| ParamOverride::parse_swept(&argument))
                .map_err(|error| BadStoredOverride(error.to_string())),
        }
    }
}
