//! DVC's variables: `params.yaml` (always loaded, and pipe's own params
//! file), the top-level `vars` (inline mappings, which become the
//! pipeline's `params:`, and other files, whose values are copied there),
//! and a stage's own `vars` (put in as their values). A reference to one
//! becomes `${params.X}` where pipe holds it at the same path.

use std::path::Path;

use crate::project_files::source::Span;
use crate::project_files::yaml::{Entry, Node, NodeValue};

use super::read::{Reader, Stop};
use super::report::Findings;
use super::template::Meaning;

/// The variables a `dvc.yaml` sees, and what pipe's params must hold.
pub(crate) struct Vars {
    /// pipe's params as the pipeline will see them: `params.yaml` merged
    /// with `pipe_params`, for looking references up.
    merged: Vec<Entry>,
    /// What goes into pipe.yaml's `params:`.
    pub(crate) pipe_params: Vec<Entry>,
    /// The top-level keys of `params.yaml`.
    pub(crate) params_yaml: Option<Node>,
}

impl Vars {
    /// `params.yaml` at the root, then each entry of the top-level `vars`.
    pub(crate) fn load(
        reader: &mut Reader,
        vars: Option<&Node>,
        findings: &mut Findings,
    ) -> Result<Vars, Stop> {
        let params_yaml = reader.read_yaml(Path::new("params.yaml"))?;
        let mut this = Vars {
            merged: params_yaml
                .as_ref()
                .and_then(Node::as_map)
                .map(<[Entry]>::to_vec)
                .unwrap_or_default(),
            pipe_params: Vec::new(),
            params_yaml,
        };
        let Some(vars) = vars else {
            return Ok(this);
        };
        let NodeValue::Seq(items) = &vars.value else {
            return Err((
                vars.span,
                format!(
                    "`vars` must be a list of files and mappings, found {}",
                    vars.describe()
                ),
            )
                .into());
        };
        for item in items {
            match &item.value {
                NodeValue::Map(entries) => this.add(entries, item.span)?,
                NodeValue::Scalar(_) if item.as_str().is_some() => {
                    let Some(entries) = vars_file(reader, item, None, findings)? else {
                        continue;
                    };
                    findings.changed(item.span, format!("vars file `{}`", item.as_str().unwrap_or_default()), "pipe reads only params.yaml beside pipe.yaml: its values are copied into pipe.yaml's `params:` (edit them there, or move them into params.yaml and delete them from pipe.yaml)");
                    this.add(&entries, item.span)?;
                }
                _ => {
                    return Err((
                        item.span,
                        format!(
                            "an entry of `vars` must be a file name or a mapping, found {}",
                            item.describe()
                        ),
                    )
                        .into())
                }
            }
        }
        Ok(this)
    }

    /// Adds `entries` to pipe's params, merged as DVC merges vars: a
    /// mapping into a mapping, never a value over another.
    pub(crate) fn add(&mut self, entries: &[Entry], span: Span) -> Result<(), Stop> {
        merge(&mut self.merged, entries).map_err(|key| {
            Stop::At(
                span,
                format!("`vars` sets `{key}` again with another value, which DVC refuses"),
            )
        })?;
        merge(&mut self.pipe_params, entries)
            .map_err(|key| Stop::At(span, format!("`vars` sets `{key}` twice")))?;
        Ok(())
    }

    /// What `path` means in a stage whose own `vars` are `stage_vars`.
    pub(crate) fn meaning<'s>(
        &'s self,
        path: &[String],
        stage_vars: &'s [Entry],
    ) -> Result<Meaning<'s>, String> {
        let root = &path[0];
        if let Some(entry) = self.merged.iter().find(|entry| &entry.key == root) {
            return walk(&entry.value, path, true);
        }
        if let Some(entry) = stage_vars.iter().find(|entry| &entry.key == root) {
            return walk(&entry.value, path, false);
        }
        Err(format!(
            "`{root}` is not in params.yaml nor in `vars` (DVC would refuse it too)"
        ))
    }
}

/// A stage's own `vars`: inline mappings and files (relative to its
/// `wdir`), whose values are put in where the stage refers to them.
pub(crate) fn stage_vars(
    reader: &mut Reader,
    node: Option<&Node>,
    wdir: Option<&str>,
    findings: &mut Findings,
) -> Result<Vec<Entry>, Stop> {
    let mut entries = Vec::new();
    let Some(node) = node else {
        return Ok(entries);
    };
    let NodeValue::Seq(items) = &node.value else {
        return Err(Stop::At(
            node.span,
            format!(
                "`vars` must be a list of files and mappings, found {}",
                node.describe()
            ),
        ));
    };
    for item in items {
        let more = match &item.value {
            NodeValue::Map(more) => more.clone(),
            NodeValue::Scalar(_) if item.as_str().is_some() => {
                vars_file(reader, item, wdir, findings)?.unwrap_or_default()
            }
            _ => {
                return Err(Stop::At(
                    item.span,
                    format!(
                        "an entry of `vars` must be a file name or a mapping, found {}",
                        item.describe()
                    ),
                ))
            }
        };
        merge(&mut entries, &more).map_err(|key| {
            Stop::At(
                item.span,
                format!("`vars` sets `{key}` again with another value, which DVC refuses"),
            )
        })?;
    }
    Ok(entries)
}

/// The values of a vars file (`file.yaml` or `file.yaml:key1,key2`,
/// relative to `base`); `None` for the root's `params.yaml`, which pipe
/// reads itself, and for a file pipe cannot read.
fn vars_file(
    reader: &mut Reader,
    item: &Node,
    base: Option<&str>,
    findings: &mut Findings,
) -> Result<Option<Vec<Entry>>, Stop> {
    let text = item.as_str().unwrap_or_default();
    let (file, keys) = match text.split_once(':') {
        Some((file, keys)) => (
            file,
            Some(keys.split(',').map(str::trim).collect::<Vec<_>>()),
        ),
        None => (text, None),
    };
    let joined = match base {
        Some(base) => format!("{base}/{file}"),
        None => file.to_string(),
    };
    let Ok(file) = crate::project_files::ProjectPath::new(&joined).map(String::from) else {
        return Err(Stop::At(
            item.span,
            format!("vars file `{joined}` is outside the project"),
        ));
    };
    if file == "params.yaml" {
        return Ok(None);
    }
    let readable = [".yaml", ".yml", ".json"]
        .iter()
        .any(|ext| file.ends_with(ext));
    if !readable {
        findings.not_carried(item.span, format!("vars file `{file}`"), "pipe reads YAML and JSON only (its params come from params.yaml and the pipeline's `params:`): move what the stages use into params.yaml; a reference to it is refused below");
        return Ok(None);
    }
    let Some(node) = reader.read_yaml(Path::new(&file))? else {
        return Err(Stop::At(
            item.span,
            format!("vars file `{file}` does not exist (DVC would refuse it too)"),
        ));
    };
    let Some(entries) = node.as_map() else {
        return Err(Stop::At(
            item.span,
            format!(
                "vars file `{file}` must hold a mapping, found {}",
                node.describe()
            ),
        ));
    };
    match keys {
        None => Ok(Some(entries.to_vec())),
        Some(keys) => {
            let mut chosen = Vec::new();
            for key in keys {
                match entries.iter().find(|entry| entry.key == key) {
                    Some(entry) => chosen.push(entry.clone()),
                    None => {
                        return Err(Stop::At(
                            item.span,
                            format!("vars file `{file}` has no `{key}`"),
                        ))
                    }
                }
            }
            Ok(Some(chosen))
        }
    }
}

/// Follows `path` from the value of its first step. A path that indexes a
/// list, or holds a key with a `.`, is not one pipe can name: its value is
/// put in as it is.
fn walk<'s>(root: &'s Node, path: &[String], is_param: bool) -> Result<Meaning<'s>, String> {
    let mut node = root;
    let mut nameable = is_param;
    for step in &path[1..] {
        node = match &node.value {
            NodeValue::Map(_) => node.get(step),
            NodeValue::Seq(items) => {
                nameable = false;
                step.parse::<usize>()
                    .ok()
                    .and_then(|index| items.get(index))
            }
            NodeValue::Scalar(_) => None,
        }
        .ok_or_else(|| {
            format!(
                "`{}` has no `{step}` (DVC would refuse it too)",
                path.join(".")
            )
        })?;
    }
    if path.iter().any(|step| step.contains('.')) {
        nameable = false;
    }
    Ok(match (nameable, is_param) {
        (true, _) => Meaning::Param {
            path: path.join("."),
            value: node,
        },
        (false, true) => Meaning::Literal {
            value: node.clone(),
            why: Some(
                "pipe's param paths name mapping keys only (no list index, no key with a `.`)"
                    .to_string(),
            ),
        },
        (false, false) => Meaning::Literal {
            value: node.clone(),
            why: Some("a stage's own `vars` are not params in pipe".to_string()),
        },
    })
}

/// Merges `entries` into `target`; the key that would be set twice with
/// different values, if any.
fn merge(target: &mut Vec<Entry>, entries: &[Entry]) -> Result<(), String> {
    for entry in entries {
        match target.iter_mut().find(|existing| existing.key == entry.key) {
            None => target.push(entry.clone()),
            Some(existing) => {
                if same_value(&existing.value, &entry.value) {
                    continue;
                }
                match (&mut existing.value.value, &entry.value.value) {
                    (NodeValue::Map(inner), NodeValue::Map(more)) => {
                        merge(inner, more).map_err(|key| format!("{}.{key}", entry.key))?
                    }
                    _ => return Err(entry.key.clone()),
                }
            }
        }
    }
    Ok(())
}

fn same_value(a: &Node, b: &Node) -> bool {
    match (&a.value, &b.value) {
        (NodeValue::Scalar(x), NodeValue::Scalar(y)) => {
            x.text == y.text && x.resolve() == y.resolve()
        }
        (NodeValue::Seq(x), NodeValue::Seq(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_value(a, b))
        }
        (NodeValue::Map(x), NodeValue::Map(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(a, b)| a.key == b.key && same_value(&a.value, &b.value))
        }
        _ => false,
    }
}
