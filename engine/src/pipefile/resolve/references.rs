//! What one `${...}` reference stands for: a param, a matrix value, or a
//! path of this or another stage.

use std::borrow::Cow;

use super::resolver::*;
use crate::pipefile::declare::DeclKind;
use crate::pipefile::interp::{self, Reference};
use crate::pipefile::params;
use crate::pipeline::StageOutRef;
use crate::project::stage_output_dir;
use crate::project_files::paths::ProjectPath;
use crate::project_files::source::Span;
use crate::suggest::{did_you_mean, hint_with_suggestion, name_list};
use crate::Result;

impl<'a> Resolver<'a> {
    /// What `${...}` names, by its namespace (the text before the first
    /// `.`), each looked up in its own method.
    pub(crate) fn evaluate(
        &mut self,
        scope: &Scope,
        reference: &Reference,
        span: Span,
        effects: &mut Effects,
    ) -> Result<Evaluated<'a>, Failure> {
        // Written out only into a message: evaluating is per stage.
        let place = Place(scope.field, scope.stage);
        let expr = nested_matrix_keys_substituted(scope, &reference.expr, &place)?;
        let expr = expr.as_ref();
        let (namespace, rest) = self.split_namespace(expr, &place)?;
        match namespace {
            "params" => self.param_reference(rest, &place, effects),
            "matrix" => matrix_reference(scope, rest, &place),
            "deps" | "outs" => self.path_reference(scope, namespace, rest, &place),
            "stages" => self.stage_reference(scope, expr, rest, &place, span, effects),
            other => {
                let namespaces = ["params", "deps", "outs", "matrix", "stages"];
                Err(failure(
                    format!("unknown namespace `{other}` in `${{{expr}}}` ({place})"),
                    hint_with_suggestion(did_you_mean(other, namespaces), "namespaces: params, deps, outs, matrix, stages; for a literal `${` write `$${`".to_string()),
                ))
            }
        }
    }

    /// `namespace.rest` of a reference; a bare name is no reference.
    fn split_namespace<'e>(
        &self,
        expr: &'e str,
        place: &Place,
    ) -> Result<(&'e str, &'e str), Failure> {
        let Some((namespace, rest)) = expr.split_once('.') else {
            let hint = if params::lookup(self.params, expr).is_some() {
                format!("params are referenced with their namespace: write `${{params.{expr}}}`")
            } else {
                format!("references look like `${{params.NAME}}`, `${{deps.NAME}}`, `${{outs.NAME}}`, `${{matrix.KEY}}` or `${{stages.STAGE.outs.NAME}}`; for a shell variable write `$${{{expr}}}`")
            };
            return Err(failure(
                format!("unknown reference `${{{expr}}}` in {place}"),
                hint,
            ));
        };
        Ok((namespace, rest))
    }

    /// `${params.PATH}`, recorded as a param the stage uses.
    fn param_reference(
        &mut self,
        rest: &str,
        place: &Place,
        effects: &mut Effects,
    ) -> Result<Evaluated<'a>, Failure> {
        match self.lookup_param(rest) {
            Some(found) if holds_template(found) => {
                let set_at = self
                    .sources
                    .location(found.span)
                    .map(|at| format!(" (set at {}:{}:{})", at.file.display(), at.line, at.col))
                    .unwrap_or_else(|| " (set with -S)".to_string());
                Err(failure(
                    format!("param `{rest}` used in {place} holds `${{`{set_at}, which pipe would pass on as those characters"),
                    "a param's value is text, never evaluated: pipe resolves no `${...}` inside a value (not `${env.N}`, not another param). For an environment variable, give the stage `env: { N: { from_env: N } }` and read `$N` in its command; for another param, reference it in the command itself. A value meant to hold `${` literally is passed by the script that reads params.yaml itself: list it under the stage's `params:` instead of interpolating it",
                ))
            }
            Some(found) => {
                effects
                    .params_used
                    .insert(rest.to_string(), params::to_json(found));
                Ok(Evaluated::Param(found))
            }
            None => Err(failure(
                format!("unknown param `{rest}` in {place}"),
                params::unknown_param_hint(self.params, rest),
            )),
        }
    }

    /// `${deps.NAME}` or `${outs.NAME}`: a path of this stage, in the
    /// fields that come after those paths are known.
    fn path_reference(
        &self,
        scope: &Scope,
        namespace: &str,
        rest: &str,
        place: &Place,
    ) -> Result<Evaluated<'a>, Failure> {
        let (entries, names): (Option<Vec<(&str, &str)>>, &str) = if namespace == "deps" {
            (
                scope.deps.map(|deps| {
                    deps.iter()
                        .map(|dep| (dep.name.as_str(), dep.path.as_str()))
                        .collect()
                }),
                "dependency",
            )
        } else {
            (
                scope.outs.map(|outs| {
                    outs.iter()
                        .map(|out| (out.name.as_str(), out.path.as_str()))
                        .collect()
                }),
                "output",
            )
        };
        let Some(entries) = entries else {
            return Err(failure(
                format!("`${{{namespace}.{rest}}}` cannot be used in `{}` (stage `{}`)", scope.field, scope.stage),
                "`${deps.NAME}` and `${outs.NAME}` are for `run`, `with` and `env`; write the path here, or use `${params.NAME}`",
            ));
        };
        let items: Vec<String> = entries
            .iter()
            .filter(|(name, _)| list_of_item(name) == Some(rest))
            .map(|(_, path)| path.to_string())
            .collect();
        match entries.iter().find(|(name, _)| *name == rest) {
            Some((_, path)) => Ok(Evaluated::Path(path.to_string())),
            None if !items.is_empty() => Ok(Evaluated::Paths(items)),
            None if namespace == "deps" && self.unresolved_deps.iter().any(|name| name == rest) => {
                Err(Failure {
                    already_reported: true,
                    ..failure(format!("dependency `{rest}` did not resolve"), "")
                })
            }
            None => {
                let mut known: Vec<&str> = entries
                    .iter()
                    .map(|(name, _)| declared_name(name))
                    .collect();
                known.dedup();
                let hint = if known.is_empty() {
                    format!(
                        "stage `{}` declares no {namespace}; add `{namespace}: {{ {rest}: PATH }}`",
                        scope.stage
                    )
                } else {
                    hint_with_suggestion(
                        did_you_mean(rest, known.iter().copied()),
                        format!("declared {namespace}: {}", name_list(&known, 10)),
                    )
                };
                Err(failure(
                    format!("unknown {names} `{rest}` in {place}"),
                    hint,
                ))
            }
        }
    }

    /// `${stages.STAGE.outs.NAME}`: another stage's output path, which
    /// makes that stage a dependency.
    fn stage_reference(
        &self,
        scope: &Scope,
        expr: &str,
        rest: &str,
        place: &Place,
        span: Span,
        effects: &mut Effects,
    ) -> Result<Evaluated<'a>, Failure> {
        if !scope.allow_stage_refs {
            return Err(failure(
                format!("`${{{expr}}}` in {place}: an output path cannot refer to another stage"),
                "write this stage's own output path; other stages refer to it with `${stages.STAGE.outs.NAME}`",
            ));
        }
        let shape_hint = "write `${stages.STAGE.outs.NAME}`, e.g. `${stages.prepare.outs.data}`";
        let Some((stage_name, out_name)) = rest.rsplit_once(".outs.") else {
            return Err(failure(
                format!("malformed stage reference `${{{expr}}}` in {place}"),
                shape_hint,
            ));
        };
        if let Some((base, selector)) = stage_name.split_once('@') {
            if selector.contains('*') {
                return self.every_expansion(base, selector, out_name, place, span, effects);
            }
        }
        let Some(&target) = self.index_by_name.get(stage_name) else {
            return Err(self.unknown_stage(stage_name, &place.to_string()));
        };
        let target_expansion = &self.expansions[target];
        let (found, list) = self.output_of(target, stage_name, out_name, place)?;
        let mut paths = Vec::with_capacity(found.len());
        for (out, path) in found {
            let reference = StageOutRef {
                stage: target_expansion.name.clone(),
                out,
            };
            paths.push(path.to_string());
            effects.stage_refs.push((reference, path, span));
        }
        match (list, paths.pop()) {
            (false, Some(path)) if paths.is_empty() => Ok(Evaluated::Path(path)),
            (_, last) => {
                paths.extend(last);
                Ok(Evaluated::Paths(paths))
            }
        }
    }

    /// `${stages.S@*.outs.O}` (every expansion of matrix stage `S`) or
    /// `${stages.S@k1=v,k2=*.outs.O}` (those with `k1=v`): output `O` of
    /// each, in the order they expand, each a dependency.
    fn every_expansion(
        &self,
        base: &str,
        selector: &str,
        out_name: &str,
        place: &Place,
        span: Span,
        effects: &mut Effects,
    ) -> Result<Evaluated<'a>, Failure> {
        let Some(expansions) = self.expansions_by_base.get(base) else {
            if self.index_by_name.contains_key(base) {
                return Err(failure(
                    format!("stage `{base}` has no matrix, so `{base}@{selector}` names nothing ({place})"),
                    format!("write `${{stages.{base}.outs.{out_name}}}`"),
                ));
            }
            return Err(self.unknown_stage(base, &place.to_string()));
        };
        let keys: Vec<&str> = expansions
            .first()
            .map(|&first| self.expansions[first].combo.keys().collect())
            .unwrap_or_default();
        let mut wanted: Vec<(&str, &str)> = Vec::new();
        if selector != "*" {
            for pair in selector.split(',') {
                let Some((key, value)) = pair.split_once('=') else {
                    return Err(failure(
                        format!("`{base}@{selector}` in {place}: `{pair}` is not `KEY=VALUE`"),
                        format!("write `{base}@*` for every expansion, or give each key a value or `*`: {}", keys.iter().map(|key| format!("`{key}=*`")).collect::<Vec<_>>().join(", ")),
                    ));
                };
                if !keys.contains(&key) {
                    return Err(failure(
                        format!("stage `{base}` has no matrix key `{key}` ({place})"),
                        hint_with_suggestion(
                            did_you_mean(key, keys.iter().copied()),
                            format!("matrix keys of `{base}`: {}", name_list(&keys, 10)),
                        ),
                    ));
                }
                wanted.push((key, value));
            }
            let missing: Vec<&str> = keys
                .iter()
                .copied()
                .filter(|key| !wanted.iter().any(|(given, _)| given == key))
                .collect();
            if !missing.is_empty() {
                return Err(failure(
                    format!("`{base}@{selector}` in {place} leaves out the matrix key{} {}", if missing.len() == 1 { "" } else { "s" }, missing.iter().map(|key| format!("`{key}`")).collect::<Vec<_>>().join(", ")),
                    format!("give every key a value or `*` ({}), or write `{base}@*` for every expansion", missing.iter().map(|key| format!("`{key}=*`")).collect::<Vec<_>>().join(", ")),
                ));
            }
        }
        let mut paths = Vec::new();
        for &target in expansions {
            let expansion = &self.expansions[target];
            let chosen = wanted.iter().all(|(key, value)| {
                *value == "*"
                    || expansion
                        .combo
                        .value(key)
                        .is_some_and(|found| found.text == *value)
            });
            if !chosen {
                continue;
            }
            let (found, _) = self.output_of(target, base, out_name, place)?;
            for (out, path) in found {
                effects.stage_refs.push((
                    StageOutRef {
                        stage: expansion.name.clone(),
                        out,
                    },
                    path.clone(),
                    span,
                ));
                paths.push(path.into());
            }
        }
        if paths.is_empty() {
            return Err(failure(
                format!("`{base}@{selector}` in {place} matches no expansion of `{base}`"),
                format!(
                    "expansions: {}",
                    name_list(
                        &expansions
                            .iter()
                            .map(|&index| self.expansions[index].name.as_str())
                            .collect::<Vec<_>>(),
                        6
                    )
                ),
            ));
        }
        Ok(Evaluated::Paths(paths))
    }

    /// The (name, path) of output `out_name` of the expansion at
    /// `target`, or of each output of the list `out_name` (`outs: { parts:
    /// ${params.parts} }`), and whether it is a list.
    #[allow(clippy::type_complexity)]
    fn output_of(
        &self,
        target: usize,
        stage_name: &str,
        out_name: &str,
        place: &Place,
    ) -> Result<(Vec<(String, ProjectPath)>, bool), Failure> {
        let mut out_names: Vec<&str> = self
            .outputs_by_stage
            .get(target)
            .map(|outs| outs.iter().map(|out| declared_name(&out.name)).collect())
            .unwrap_or_default();
        out_names.dedup();
        let target_expansion = &self.expansions[target];
        let target_decl = &self.decls[target_expansion.decl];
        let outs = self.outputs_by_stage.get(target);
        let items: Vec<(String, ProjectPath)> = outs
            .into_iter()
            .flatten()
            .filter(|out| list_of_item(&out.name) == Some(out_name))
            .map(|out| (out.name.clone(), out.path.clone()))
            .collect();
        match outs.and_then(|outs| outs.iter().find(|out| out.name == out_name)) {
            Some(out) => Ok((vec![(out.name.clone(), out.path.clone())], false)),
            None if !items.is_empty() => Ok((items, true)),
            // Without its catalog entry (the file has other
            // errors, reported already) a `uses:` stage's outputs
            // are unknown: the reference cannot be checked yet.
            None if matches!(target_decl.kind, DeclKind::Worker { .. })
                && self.catalog_entries[target_expansion.decl].is_none() =>
            {
                let written = format!(
                    "{}/{out_name}",
                    stage_output_dir(self.pipeline, &target_expansion.name)
                );
                let path = ProjectPath::new(&written).map_err(|_| {
                    failure(
                        format!("`{out_name}` ({place}) names no file of stage `{stage_name}`"),
                        "name an output as its worker declares it: a plain file name",
                    )
                })?;
                Ok((vec![(out_name.to_string(), path)], false))
            }
            None => {
                let hint = if out_names.is_empty() {
                    format!("stage `{stage_name}` declares no outputs; add `outs: {{ {out_name}: PATH }}` to it")
                } else {
                    hint_with_suggestion(
                        did_you_mean(out_name, out_names.iter().copied()),
                        format!("outputs of `{stage_name}`: {}", name_list(&out_names, 10)),
                    )
                };
                Err(failure(
                    format!("stage `{stage_name}` has no output `{out_name}` ({place})"),
                    hint,
                ))
            }
        }
    }

    pub(crate) fn unknown_stage(&self, name: &str, place: &str) -> Failure {
        if let Some(expanded) = self.expansions_by_base.get(name) {
            let names: Vec<&str> = expanded
                .iter()
                .map(|&index| self.expansions[index].name.as_str())
                .collect();
            return failure(
                format!("stage `{name}` has a matrix, so `{name}` alone does not name one stage ({place})"),
                format!("refer to one expansion: {}; or to every one: `{name}@*`", name_list(&names, 6)),
            );
        }
        let base = name.split_once('@').map_or(name, |(base, _)| base);
        let mut candidates: Vec<&str> = self.decls.iter().map(|decl| decl.name).collect();
        if let Some(expanded) = self.expansions_by_base.get(base) {
            candidates.extend(
                expanded
                    .iter()
                    .map(|&index| self.expansions[index].name.as_str()),
            );
        }
        let known: Vec<&str> = self.decls.iter().map(|decl| decl.name).collect();
        // `featurs@n=1`: the typo is in the base name; the expansion is
        // suggested when the corrected stage has it.
        let suggestion = did_you_mean(name, candidates.iter().copied())
            .map(str::to_string)
            .or_else(|| {
                let (_, combination) = name.split_once('@')?;
                let close = did_you_mean(base, known.iter().copied())?;
                let expansion = format!("{close}@{combination}");
                Some(if self.index_by_name.contains_key(expansion.as_str()) {
                    expansion
                } else {
                    close.to_string()
                })
            });
        failure(
            format!("unknown stage `{name}` ({place})"),
            hint_with_suggestion(
                suggestion.as_deref(),
                format!("stages: {}", name_list(&known, 10)),
            ),
        )
    }
}

/// The reference's text with each `${matrix.KEY}` inside it replaced by
/// this expansion's value (`${stages.train@lr=${matrix.lr}.outs.model}`).
fn nested_matrix_keys_substituted<'e>(
    scope: &Scope,
    expr: &'e str,
    place: &Place,
) -> Result<Cow<'e, str>, Failure> {
    if !expr.contains("${") {
        return Ok(Cow::Borrowed(expr));
    }
    if !scope.has_matrix {
        return Err(failure(
            format!("`${{matrix...}}` inside a reference in {place}, which has no `matrix`"),
            "only a matrix stage can name another stage's expansion by its own matrix value",
        ));
    }
    let substituted = interp::substitute_matrix_keys(expr, |key| {
        scope.combo.value(key).map(|value| value.text.clone())
    })
    .map_err(|key| {
        let keys: Vec<&str> = scope.combo.keys().collect();
        failure(
            format!("unknown matrix key `{key}` in {place}"),
            hint_with_suggestion(
                did_you_mean(key, keys.iter().copied()),
                format!("matrix keys: {}", name_list(&keys, 10)),
            ),
        )
    })?;
    Ok(Cow::Owned(substituted))
}

/// `${matrix.KEY}`: this expansion's value of a key of the stage's matrix.
fn matrix_reference<'n>(
    scope: &Scope,
    rest: &str,
    place: &Place,
) -> Result<Evaluated<'n>, Failure> {
    if !scope.has_matrix {
        return Err(failure(
            format!("`${{matrix.{rest}}}` in {place}, which has no `matrix`"),
            format!("add `matrix: {{ {rest}: [...] }}` to the stage, or use a param: `${{params.{rest}}}`"),
        ));
    }
    match scope.combo.value(rest) {
        Some(value) => Ok(Evaluated::Matrix(value.clone())),
        None => {
            let keys: Vec<&str> = scope.combo.keys().collect();
            Err(failure(
                format!("unknown matrix key `{rest}` in {place}"),
                hint_with_suggestion(
                    did_you_mean(rest, keys.iter().copied()),
                    format!("matrix keys: {}", name_list(&keys, 10)),
                ),
            ))
        }
    }
}

/// Whether a param's value holds `${` in any of its strings: a template
/// from another tool (Hydra's `${oc.env:N}`, DVC's `${vars}`), which pipe
/// would insert verbatim.
fn holds_template(node: &crate::project_files::yaml::Node) -> bool {
    use crate::project_files::yaml::NodeValue;
    match &node.value {
        NodeValue::Scalar(scalar) => scalar.text.contains("${"),
        NodeValue::Seq(items) => items.iter().any(holds_template),
        NodeValue::Map(entries) => entries.iter().any(|entry| holds_template(&entry.value)),
    }
}
