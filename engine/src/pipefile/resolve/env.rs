//! A stage's `env`: values interpolated, and `from_env` values taken
//! from pipe's own environment, secret or part of the key.

use super::resolver::*;
use crate::pipefile::declare::{is_valid_identifier, type_error, Decl};
use crate::project_files::collect::Diagnostics;
use crate::project_files::yaml::{Entry, Resolved};
use crate::Diagnostic;
use std::collections::{BTreeMap, BTreeSet};

impl<'a> Resolver<'a> {
    pub(crate) fn env(
        &mut self,
        decl: &Decl,
        scope: &Scope,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> (BTreeMap<String, String>, BTreeSet<String>) {
        let mut env = BTreeMap::new();
        let mut secret_env = BTreeSet::new();
        let Some(node) = decl.node.get("env") else {
            return (env, secret_env);
        };
        let Some(entries) = node.as_map() else {
            diagnostics.push(type_error(
                self.sources,
                node,
                format!(
                    "`env` of stage `{}` must be a mapping of NAME: value",
                    decl.name
                ),
                "write e.g.\nenv:\n  OMP_NUM_THREADS: 4",
            ));
            return (env, secret_env);
        };
        for entry in entries {
            if !is_valid_identifier(&entry.key) {
                diagnostics.push(
                    Diagnostic::new("bad-env-name", format!("`{}` is not a valid environment variable name (stage `{}`)", entry.key, decl.name))
                        .at(self.location(entry.key_span))
                        .with_hint("use letters, digits and `_`, starting with a letter or `_`, e.g. `CUDA_VISIBLE_DEVICES`"),
                );
                continue;
            }
            let value = &entry.value;
            if value.as_map().is_some() {
                if let Some((text, secret)) = self.env_from_environment(decl, entry, diagnostics) {
                    if secret {
                        secret_env.insert(entry.key.clone());
                    }
                    env.insert(entry.key.clone(), text);
                }
                continue;
            }
            if value.as_scalar().is_none() || value.is_null() {
                diagnostics.push(type_error(
                    self.sources,
                    value,
                    format!(
                        "env `{}` of stage `{}` must be a string, number or boolean",
                        entry.key, decl.name
                    ),
                    format!(
                        "write e.g. `{}: \"value\"`; for an empty value write `\"\"`",
                        entry.key
                    ),
                ));
                continue;
            }
            if let Some(text) = self.resolve_string(scope, value, effects, diagnostics) {
                if text.contains('\0') {
                    diagnostics.push(self.nul_byte(
                        format!("env `{}` of stage `{}`", entry.key, decl.name),
                        value,
                    ));
                    continue;
                }
                env.insert(entry.key.clone(), text);
            }
        }
        (env, secret_env)
    }

    /// `NAME: { from_env: VAR, secret: true|false }`: the value of `VAR` in
    /// pipe's own environment, so a credential never sits in the pipeline
    /// file. `secret` must be spelled out: a secret is left out of the key,
    /// a plain value is part of it, and guessing wrong either leaks a
    /// token into the run history or reuses a result made with another value.
    pub(crate) fn env_from_environment(
        &self,
        decl: &Decl,
        entry: &Entry,
        diagnostics: &mut Diagnostics,
    ) -> Option<(String, bool)> {
        let name = &entry.key;
        let example = format!("write e.g. `{name}: {{ from_env: {name}, secret: true }}`");
        let fields = entry.value.as_map().unwrap_or_default();
        let mut problem = false;
        for field in fields {
            if !["from_env", "secret"].contains(&field.key.as_str()) {
                diagnostics.push(
                    Diagnostic::new(
                        "bad-env-field",
                        format!(
                            "env `{name}` of stage `{}` has no field `{}`; its fields are `from_env` and `secret`",
                            decl.name, field.key
                        ),
                    )
                    .at(self.location(field.key_span))
                    .with_hint(example.clone()),
                );
                problem = true;
            }
        }
        let variable = match entry.value.get("from_env") {
            Some(node) => match node.as_str() {
                Some(variable) if is_valid_identifier(variable) => Some((variable, node)),
                _ => {
                    diagnostics.push(type_error(
                        self.sources,
                        node,
                        format!("`from_env` of env `{name}` (stage `{}`) must name an environment variable", decl.name),
                        example.clone(),
                    ));
                    None
                }
            },
            None => {
                diagnostics.push(
                    Diagnostic::new(
                        "bad-env-field",
                        format!("env `{name}` of stage `{}` needs `from_env`, the variable of pipe's environment to pass on", decl.name),
                    )
                    .at(self.location(entry.value.span))
                    .with_hint(example.clone()),
                );
                None
            }
        };
        let secret = match entry.value.get("secret") {
            Some(node) => match node.as_scalar().map(|scalar| scalar.resolve()) {
                Some(Resolved::Bool(secret)) => Some(secret),
                _ => {
                    diagnostics.push(type_error(
                        self.sources,
                        node,
                        format!(
                            "`secret` of env `{name}` (stage `{}`) must be `true` or `false`",
                            decl.name
                        ),
                        example.clone(),
                    ));
                    None
                }
            },
            None => {
                diagnostics.push(
                    Diagnostic::new(
                        "bad-env-field",
                        format!("env `{name}` of stage `{}` must say whether its value is a secret", decl.name),
                    )
                    .at(self.location(entry.value.span))
                    .with_hint(format!(
                        "add `secret: true` for a credential (passed to the stage, shown as `***`, not part of the key) or `secret: false` for a plain value (part of the key); {example}"
                    )),
                );
                None
            }
        };
        let ((variable, variable_node), secret) = (variable?, secret?);
        if problem {
            return None;
        }
        match std::env::var(variable) {
            Ok(text) => Some((text, secret)),
            Err(_) => {
                diagnostics.push(
                    Diagnostic::new(
                        "env-not-set",
                        format!(
                            "env `{name}` of stage `{}` comes from `{variable}`, which is not set in pipe's environment",
                            decl.name
                        ),
                    )
                    .at(self.location(variable_node.span))
                    .with_hint(format!("set it before running pipe, e.g. `export {variable}=...`")),
                );
                None
            }
        }
    }
}
