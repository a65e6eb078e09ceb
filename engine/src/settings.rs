//! Layered settings, the precedence written once: a setting takes its value
//! from the first source that gives one, in the order a command-line flag,
//! an environment variable, the pipeline file, the project's
//! `pipe.config.yaml`, and says which source that was. A bad value is an
//! error that names its source (the flag, the variable, or `file:line:col`)
//! and what to write instead. The executor (`executor.rs`), the remote
//! cache (`remote.rs`) and the link modes (`link_modes` below) resolve
//! through it.

use std::collections::BTreeMap;
use std::fmt;

use pipe_cache::LinkMode;

use crate::diagnostic::{Diagnostic, Location};
use crate::{EngineError, Result};

pub use crate::project_files::PROJECT_CONFIG_FILE;

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A command-line flag, as spelled (`--executor`).
    Flag(&'static str),
    /// An environment variable, by name.
    Env(&'static str),
    /// The pipeline file, at the value when known.
    Pipeline(Option<Location>),
    /// The project's `pipe.config.yaml`, at the value when known.
    ProjectConfig(Option<Location>),
    /// No source gave one.
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag(flag) => write!(f, "{flag}"),
            Source::Env(name) => write!(f, "{name}"),
            Source::Pipeline(Some(at)) | Source::ProjectConfig(Some(at)) => {
                write!(f, "{}:{}:{}", at.file.display(), at.line, at.col)
            }
            Source::Pipeline(None) => write!(f, "the pipeline file"),
            Source::ProjectConfig(None) => {
                write!(f, "{PROJECT_CONFIG_FILE}")
            }
            Source::Default => write!(f, "the default"),
        }
    }
}

/// A setting's value and the source that gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

/// Why a value cannot be used: what is wrong with it (when more than
/// "not one of these" needs saying), and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub problem: Option<String>,
    pub expected: String,
}

impl Invalid {
    pub fn expected(expected: impl Into<String>) -> Invalid {
        Invalid {
            problem: None,
            expected: expected.into(),
        }
    }

    pub fn because(problem: impl Into<String>, expected: impl Into<String>) -> Invalid {
        Invalid {
            problem: Some(problem.into()),
            expected: expected.into(),
        }
    }
}

/// Reads a flag's or a variable's text as the setting's value.
pub type Parse<T> = fn(&str) -> std::result::Result<T, Invalid>;

/// Where in a file each value of a settings section is written, by the
/// value's name (`type`, `url`, `read_only`, ...).
pub type Places = BTreeMap<&'static str, Location>;

/// One setting's sources, to be asked in precedence order.
pub struct Setting<T> {
    name: &'static str,
    layers: Vec<Layer<T>>,
}

enum Layer<T> {
    Value(Sourced<T>),
    Text {
        source: Source,
        text: String,
        parse: Parse<T>,
    },
}

impl<T> Setting<T> {
    /// `name` says what the setting is in messages ("the executor").
    pub fn new(name: &'static str) -> Setting<T> {
        Setting {
            name,
            layers: Vec::new(),
        }
    }

    /// A flag's value, already parsed (clap did).
    pub fn flag(mut self, flag: &'static str, value: Option<T>) -> Self {
        if let Some(value) = value {
            self.layers.push(Layer::Value(Sourced {
                value,
                source: Source::Flag(flag),
            }));
        }
        self
    }

    /// A flag's text, read by `parse` when the setting is resolved.
    pub fn flag_text(mut self, flag: &'static str, text: Option<&str>, parse: Parse<T>) -> Self {
        if let Some(text) = text {
            self.layers.push(Layer::Text {
                source: Source::Flag(flag),
                text: text.to_string(),
                parse,
            });
        }
        self
    }

    /// The environment variable `name`, read by `parse`; set but empty
    /// counts as unset.
    pub fn env(self, name: &'static str, parse: Parse<T>) -> Self {
        let text = std::env::var(name).ok();
        self.env_text(name, text.as_deref(), parse)
    }

    /// `env` with the variable's value given (tests, and a caller that
    /// has read the environment already).
    pub fn env_text(mut self, name: &'static str, text: Option<&str>, parse: Parse<T>) -> Self {
        if let Some(text) = text.filter(|text| !text.is_empty()) {
            self.layers.push(Layer::Text {
                source: Source::Env(name),
                text: text.to_string(),
                parse,
            });
        }
        self
    }

    /// The pipeline file's value, written at `at`.
    pub fn pipeline(mut self, value: Option<T>, at: Option<&Location>) -> Self {
        if let Some(value) = value {
            self.layers.push(Layer::Value(Sourced {
                value,
                source: Source::Pipeline(at.cloned()),
            }));
        }
        self
    }

    /// `pipe.config.yaml`'s value, written at `at`.
    pub fn project(mut self, value: Option<T>, at: Option<&Location>) -> Self {
        if let Some(value) = value {
            self.layers.push(Layer::Value(Sourced {
                value,
                source: Source::ProjectConfig(at.cloned()),
            }));
        }
        self
    }

    /// Every source that gives a value, first first. A flag or variable
    /// that does not parse is an error even when a source before it gives
    /// a value: a typo in the environment is not silently outvoted.
    pub fn all(self) -> Result<Vec<Sourced<T>>> {
        let name = self.name;
        self.layers
            .into_iter()
            .map(|layer| match layer {
                Layer::Value(sourced) => Ok(sourced),
                Layer::Text {
                    source,
                    text,
                    parse,
                } => match parse(&text) {
                    Ok(value) => Ok(Sourced { value, source }),
                    Err(invalid) => Err(text_error(name, &source, &text, &invalid)),
                },
            })
            .collect()
    }

    /// The value of the first source that gives one, and that source.
    pub fn resolve(self) -> Result<Option<Sourced<T>>> {
        Ok(self.all()?.into_iter().next())
    }

    /// `resolve`, with the winning value held to `check` (what the file
    /// parsers cannot know alone): a refusal names where the value came from.
    pub fn resolve_checked(
        self,
        check: impl Fn(&T) -> std::result::Result<(), Invalid>,
    ) -> Result<Option<Sourced<T>>> {
        let name = self.name;
        let Some(sourced) = self.resolve()? else {
            return Ok(None);
        };
        match check(&sourced.value) {
            Ok(()) => Ok(Some(sourced)),
            Err(invalid) => Err(refused(name, &sourced.source, &invalid)),
        }
    }
}

/// A flag's or variable's text that does not parse.
fn text_error(name: &str, source: &Source, text: &str, invalid: &Invalid) -> EngineError {
    let problem = invalid
        .problem
        .as_ref()
        .map(|problem| format!(": {problem}"))
        .unwrap_or_default();
    EngineError::usage(
        format!("{source} is `{text}`{problem}"),
        how_to_fix(name, source, &invalid.expected),
    )
}

/// A value that parsed but cannot be used.
pub fn refused(name: &str, source: &Source, invalid: &Invalid) -> EngineError {
    let problem = invalid.problem.as_deref().unwrap_or("not accepted");
    match source {
        Source::Pipeline(Some(at)) | Source::ProjectConfig(Some(at)) => {
            EngineError::Spec(vec![Diagnostic::new(
                "bad-setting",
                format!("{name}: {problem}"),
            )
            .at(Some(at.clone()))
            .with_hint(how_to_fix(name, source, &invalid.expected))])
        }
        _ => EngineError::usage(
            format!("{name} from {source}: {problem}"),
            how_to_fix(name, source, &invalid.expected),
        ),
    }
}

fn how_to_fix(name: &str, source: &Source, expected: &str) -> String {
    match source {
        Source::Flag(flag) => format!("give {flag} {expected}"),
        Source::Env(variable) => format!("set {variable} to {expected}, or unset it"),
        Source::Pipeline(_) | Source::ProjectConfig(_) => {
            format!("write {expected} for {name} there")
        }
        Source::Default => format!("set {name} to {expected}"),
    }
}

/// `reflink,copy`: link modes tried in order.
pub fn parse_link_modes(text: &str) -> std::result::Result<Vec<LinkMode>, Invalid> {
    let expected = "link modes, comma-separated, tried in order: reflink, hardlink, symlink, copy";
    let modes = text
        .split(',')
        .map(|name| {
            LinkMode::parse(name.trim()).ok_or_else(|| {
                Invalid::because(format!("unknown link mode `{}`", name.trim()), expected)
            })
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(modes)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;

    fn at(file: &str, line: usize, col: usize) -> Location {
        Location {
            file: Arc::from(Path::new(file)),
            line,
            col,
            len: 1,
            source_line: Arc::from(""),
        }
    }

    fn number(text: &str) -> std::result::Result<u32, Invalid> {
        text.parse()
            .map_err(|_| Invalid::expected("a whole number"))
    }

    fn setting(
        flag: Option<&str>,
        env: Option<&str>,
        pipeline: Option<u32>,
        project: Option<u32>,
    ) -> Setting<u32> {
        Setting::new("the answer")
            .flag_text("--answer", flag, number)
            .env_text("PIPE_ANSWER", env, number)
            .pipeline(pipeline, Some(&at("pipe.yaml", 3, 9)))
            .project(project, Some(&at("pipe.config.yaml", 1, 9)))
    }

    fn resolved(setting: Setting<u32>) -> Option<(u32, String)> {
        setting
            .resolve()
            .unwrap()
            .map(|sourced| (sourced.value, sourced.source.to_string()))
    }

    #[test]
    fn the_first_source_that_gives_a_value_wins() {
        let all = (Some("1"), Some("2"), Some(3), Some(4));
        assert_eq!(
            resolved(setting(all.0, all.1, all.2, all.3)),
            Some((1, "--answer".into()))
        );
        assert_eq!(
            resolved(setting(None, all.1, all.2, all.3)),
            Some((2, "PIPE_ANSWER".into()))
        );
        assert_eq!(
            resolved(setting(None, None, all.2, all.3)),
            Some((3, "pipe.yaml:3:9".into()))
        );
        assert_eq!(
            resolved(setting(None, None, None, all.3)),
            Some((4, "pipe.config.yaml:1:9".into()))
        );
        assert_eq!(resolved(setting(None, None, None, None)), None);
    }

    #[test]
    fn an_empty_variable_is_unset() {
        assert_eq!(
            resolved(setting(None, Some(""), Some(3), None)),
            Some((3, "pipe.yaml:3:9".into()))
        );
    }

    #[test]
    fn every_source_is_listed_first_first() {
        let all = setting(None, Some("2"), Some(3), Some(4)).all().unwrap();
        let values: Vec<u32> = all.iter().map(|sourced| sourced.value).collect();
        assert_eq!(values, [2, 3, 4]);
    }

    #[test]
    fn a_bad_flag_names_the_flag_and_what_it_takes() {
        let error = setting(Some("many"), None, None, None)
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(error.contains("--answer is `many`"), "{error}");
        assert!(
            error.contains("hint: give --answer a whole number"),
            "{error}"
        );
    }

    #[test]
    fn a_bad_variable_names_the_variable_even_under_a_flag() {
        let error = setting(Some("1"), Some("x"), None, None)
            .resolve()
            .unwrap_err();
        assert_eq!(error.exit_code(), crate::ExitCode::InvalidInput);
        let text = error.to_string();
        assert!(text.contains("PIPE_ANSWER is `x`"), "{text}");
        assert!(
            text.contains("set PIPE_ANSWER to a whole number, or unset it"),
            "{text}"
        );
    }

    #[test]
    fn a_refused_value_from_a_file_is_located_there() {
        let odd = |value: &u32| {
            if value.is_multiple_of(2) {
                Ok(())
            } else {
                Err(Invalid::because(
                    format!("{value} is odd"),
                    "an even number",
                ))
            }
        };
        for (pipeline, project, place) in [
            (Some(3), Some(4), "pipe.yaml:3:9"),
            (None, Some(5), "pipe.config.yaml:1:9"),
        ] {
            let error = setting(None, None, pipeline, project)
                .resolve_checked(odd)
                .unwrap_err();
            let EngineError::Spec(diagnostics) = &error else {
                panic!("not located: {error}");
            };
            let location = diagnostics[0].location.as_ref().unwrap();
            assert_eq!(
                format!(
                    "{}:{}:{}",
                    location.file.display(),
                    location.line,
                    location.col
                ),
                place
            );
            let text = error.to_string();
            assert!(text.contains("the answer: "), "{text}");
            assert!(text.contains("is odd"), "{text}");
            assert!(text.contains("write an even number"), "{text}");
        }
        let from_env = setting(None, Some("7"), Some(2), None)
            .resolve_checked(odd)
            .unwrap_err()
            .to_string();
        assert!(
            from_env.contains("the answer from PIPE_ANSWER: 7 is odd"),
            "{from_env}"
        );
        assert!(
            from_env.contains("set PIPE_ANSWER to an even number"),
            "{from_env}"
        );
        let from_flag = setting(Some("9"), None, None, None)
            .resolve_checked(odd)
            .unwrap_err()
            .to_string();
        assert!(from_flag.contains("from --answer"), "{from_flag}");
        let fine = setting(None, None, Some(2), Some(5)).resolve_checked(odd);
        assert_eq!(fine.unwrap().map(|sourced| sourced.value), Some(2));
    }

    #[test]
    fn link_modes_parse_in_order_and_name_a_bad_one() {
        assert_eq!(
            parse_link_modes("hardlink, copy"),
            Ok(vec![LinkMode::Hardlink, LinkMode::Copy])
        );
        let invalid = parse_link_modes("reflink,softlink").unwrap_err();
        assert_eq!(
            invalid.problem.as_deref(),
            Some("unknown link mode `softlink`")
        );
    }
}
