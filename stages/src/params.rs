//! A stage's `with:` read once into its own `#[derive(Deserialize)]`
//! struct ([`StageContext::params`](crate::StageContext::params)), with
//! errors that name the param, as reading the params one by one would.
//!
//! The engine has checked every value against the stage's `ParamSpec`s
//! before the worker starts, so these errors meet only a hand-written
//! invocation, or a worker from another build than the engine.

use std::fmt;

use serde::de::{
    self, Deserialize, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, Visitor,
};
use serde_json::{Map, Value};

use crate::StageError;

/// `params` as a `T`. `stage` (`name@version`) is named in the errors
/// that are not about one param.
pub(crate) fn from_params<T: DeserializeOwned>(
    params: &Map<String, Value>,
    stage: &str,
) -> Result<T, StageError> {
    T::deserialize(ParamsDeserializer { params }).map_err(|error| match error {
        ParamError::Param {
            name,
            message,
            required,
        } => {
            let hint = if required {
                format!("set `{name}` under `with:`")
            } else {
                String::new()
            };
            StageError::param(&name, message, hint)
        }
        ParamError::Stage(message) => StageError::input(
            format!("the params of `{stage}` do not fit the stage: {message}"),
            "`pipe stages NAME` lists its params; pipe and its workers must come from the same build",
        ),
    })
}

/// For a list param: unset (null) is the empty list.
pub(crate) fn unset_is_empty<'de, D: de::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(deserializer)?.unwrap_or_default())
}

#[derive(Debug)]
enum ParamError {
    /// One param's value does not fit its field, or a required one is
    /// missing.
    Param {
        name: String,
        message: String,
        required: bool,
    },
    /// The params as a whole do not fit (an unknown param, where the
    /// struct denies them).
    Stage(String),
}

impl fmt::Display for ParamError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::Param { name, message, .. } => write!(formatter, "`{name}`: {message}"),
            ParamError::Stage(message) => formatter.write_str(message),
        }
    }
}

impl std::error::Error for ParamError {}

impl de::Error for ParamError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        ParamError::Stage(message.to_string())
    }

    fn missing_field(field: &'static str) -> Self {
        ParamError::Param {
            name: field.to_string(),
            message: "is required".to_string(),
            required: true,
        }
    }
}

/// The params object, handing each value to its field with its name kept
/// for the error.
struct ParamsDeserializer<'a> {
    params: &'a Map<String, Value>,
}

impl<'de> de::Deserializer<'de> for ParamsDeserializer<'_> {
    type Error = ParamError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ParamError> {
        visitor.visit_map(ParamsAccess {
            entries: self.params.iter(),
            current: None,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

struct ParamsAccess<'a> {
    entries: serde_json::map::Iter<'a>,
    /// The param whose name was handed out last, whose value comes next.
    current: Option<(&'a String, &'a Value)>,
}

impl<'de> MapAccess<'de> for ParamsAccess<'_> {
    type Error = ParamError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ParamError> {
        let Some((name, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.current = Some((name, value));
        seed.deserialize(name.as_str().into_deserializer())
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, ParamError> {
        let (name, value) = self
            .current
            .take()
            .ok_or_else(|| ParamError::Stage("internal: a param value without its name".into()))?;
        seed.deserialize(value.clone())
            .map_err(|error| ParamError::Param {
                name: name.clone(),
                // Null is how an unset param arrives: for a field that
                // cannot be unset, that is a missing param.
                message: if value.is_null() {
                    "is required".to_string()
                } else {
                    error.to_string()
                },
                required: value.is_null(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    struct Example {
        url: String,
        retries: u64,
        filename: Option<String>,
    }

    fn read(params: Value) -> Result<Example, StageError> {
        from_params(params.as_object().unwrap(), "data/example@1")
    }

    #[test]
    fn every_field_is_read_from_its_param() {
        let example =
            read(json!({"url": "u", "retries": 3, "filename": null, "extra": 1})).unwrap();
        assert_eq!(
            (example.url.as_str(), example.retries, example.filename),
            ("u", 3, None)
        );
    }

    #[test]
    fn a_value_that_does_not_fit_names_its_param() {
        let error = read(json!({"url": "u", "retries": "many", "filename": null})).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("param `retries`: invalid type"),
            "{error}"
        );
    }

    #[test]
    fn a_missing_or_unset_param_is_required_with_a_hint() {
        for params in [
            json!({"retries": 1, "filename": null}),
            json!({"url": null, "retries": 1, "filename": null}),
        ] {
            let error = read(params).unwrap_err();
            assert_eq!(error.to_string(), "param `url`: is required");
            assert_eq!(error.hint(), Some("set `url` under `with:`"));
        }
    }
}
