//! DVC's `foreach ... do` and `matrix:` stages as pipe stages. Where
//! pipe's matrix says the same thing (one list of plain values per key,
//! each used as a whole), the stage becomes one matrix stage: `${item}`
//! is `${matrix.item}`, `${item.k}` of a DVC matrix is `${matrix.k}`, and
//! its `${key}` the values joined with `-`, as DVC names them. Otherwise
//! (an item that is a mapping, a value with a space or a `/`), the stage
//! is written out once per item with the item's values put in.

use crate::pipefile::is_plain_value;
use crate::project_files::source::Span;
use crate::project_files::yaml::{Entry, Node, NodeValue, Scalar};

use super::emit::MatrixValues;
use super::python_text::{dvc_text, is_collection, same_text};
use super::report::Findings;
use super::template::{self, Meaning, Piece};
use super::vars::Vars;

/// What `${item}` and `${key}` stand for in one stage written here.
#[derive(Debug, Clone)]
pub(crate) enum Binding {
    /// A plain stage: `item` and `key` are variables like any other.
    None,
    /// A pipe matrix stage: pipe's text for `${item}`, for each
    /// `${item.FIELD}`, and for `${key}`.
    Matrix {
        item: Option<String>,
        fields: Vec<(String, String)>,
        key: Option<String>,
    },
    /// One item written out: its value and its key.
    Literal { item: Node, key: Option<Node> },
}

impl Binding {
    /// What `path` means in a stage bound so, `stage_vars` being its own
    /// `vars`.
    pub(crate) fn meaning<'s>(
        &'s self,
        path: &[String],
        vars: &'s Vars,
        stage_vars: &'s [Entry],
    ) -> Result<Meaning<'s>, String> {
        match (self, path[0].as_str(), &path[1..]) {
            (
                Binding::Matrix {
                    item: Some(item), ..
                },
                "item",
                [],
            ) => Ok(Meaning::Matrix(item.clone())),
            (Binding::Matrix { fields, .. }, "item", [field]) => fields
                .iter()
                .find(|(name, _)| name == field)
                .map(|(_, text)| Meaning::Matrix(text.clone()))
                .ok_or_else(|| format!("the items have no `{field}` (DVC would refuse it too)")),
            (Binding::Matrix { key: Some(key), .. }, "key", []) => Ok(Meaning::Matrix(key.clone())),
            (Binding::Literal { item, .. }, "item", rest) => literal_at(item, rest),
            (Binding::Literal { key: Some(key), .. }, "key", rest) => literal_at(key, rest),
            _ => vars.meaning(path, stage_vars),
        }
    }
}

fn literal_at<'s>(node: &Node, rest: &[String]) -> Result<Meaning<'s>, String> {
    let mut value = node;
    for step in rest {
        value = match &value.value {
            NodeValue::Map(_) => value.get(step),
            NodeValue::Seq(items) => step
                .parse::<usize>()
                .ok()
                .and_then(|index| items.get(index)),
            NodeValue::Scalar(_) => None,
        }
        .ok_or_else(|| format!("the item has no `{step}` (DVC would refuse it too)"))?;
    }
    Ok(Meaning::Literal {
        value: value.clone(),
        why: None,
    })
}

/// One stage to write for a DVC stage entry.
pub(crate) struct Planned {
    pub name: String,
    pub binding: Binding,
    pub matrix: Vec<(String, MatrixValues)>,
}

/// A DVC stage entry: its body (the stage, or `do:`) and the pipe stages
/// it becomes.
pub(crate) struct Plan<'n> {
    pub body: &'n Node,
    pub stages: Vec<Planned>,
}

type Stop = (Span, String);

/// How the DVC stage `name` (`definition`) is written here.
pub(crate) fn plan<'n>(
    name: &str,
    base: &str,
    definition: &'n Node,
    vars: &Vars,
    findings: &mut Findings,
) -> Result<Plan<'n>, Stop> {
    if let Some(foreach) = definition.get("foreach") {
        let Some(body) = definition.get("do").filter(|body| body.as_map().is_some()) else {
            return Err((definition.span, format!("stage `{name}` has `foreach` without a `do:` mapping (DVC would refuse it too)")));
        };
        let (data, param) = iterable(foreach, vars)?;
        let uses = Uses::of(body);
        let stages = match foreach_matrix(&data, param.as_deref(), &uses) {
            Some((binding, matrix)) => {
                note_matrix_names(name, base, &matrix, foreach.span, findings);
                vec![Planned {
                    name: base.to_string(),
                    binding,
                    matrix,
                }]
            }
            None => written_out(name, base, foreach_members(&data), foreach.span, findings),
        };
        return Ok(Plan { body, stages });
    }
    if let Some(matrix) = definition.get("matrix") {
        let Some(entries) = matrix.as_map() else {
            return Err((matrix.span, format!("`matrix` of stage `{name}` must be a mapping of names to lists (DVC would refuse it too)")));
        };
        let mut axes = Vec::new();
        for entry in entries {
            let (values, param) = iterable(&entry.value, vars)?;
            let NodeValue::Seq(items) = &values.value else {
                return Err((
                    entry.value.span,
                    format!("`matrix.{}` of stage `{name}` must be a list", entry.key),
                ));
            };
            axes.push((entry.key.clone(), items.clone(), param));
        }
        let uses = Uses::of(definition);
        let stages = match matrix_matrix(&axes, &uses) {
            Some((binding, axes)) => {
                note_matrix_names(name, base, &axes, matrix.span, findings);
                vec![Planned {
                    name: base.to_string(),
                    binding,
                    matrix: axes,
                }]
            }
            None => written_out(
                name,
                base,
                matrix_members(&axes, matrix.span),
                matrix.span,
                findings,
            ),
        };
        return Ok(Plan {
            body: definition,
            stages,
        });
    }
    Ok(Plan {
        body: definition,
        stages: vec![Planned {
            name: base.to_string(),
            binding: Binding::None,
            matrix: Vec::new(),
        }],
    })
}

/// The list or mapping iterated over: written in place, or `${X}`
/// naming one (with X's param path when pipe holds it).
fn iterable(node: &Node, vars: &Vars) -> Result<(Node, Option<String>), Stop> {
    let Some(text) = node.as_str() else {
        return Ok((node.clone(), None));
    };
    let pieces = template::parse(text).map_err(|bad| (node.span, bad.message))?;
    let [Piece::Ref(reference)] = pieces.as_slice() else {
        return Err((node.span, format!("`{text}` is neither a list, a mapping nor one `${{...}}` naming one (DVC would refuse it too)")));
    };
    match vars
        .meaning(&reference.path, &[])
        .map_err(|why| (node.span, why))?
    {
        Meaning::Param { path, value } => Ok((value.clone(), Some(path))),
        Meaning::Literal { value, .. } => Ok((value, None)),
        Meaning::Matrix(_) => Err((node.span, "a matrix value cannot be iterated".to_string())),
    }
}

/// How the body refers to the item and its key.
#[derive(Debug, Default)]
struct Uses {
    whole_item: bool,
    fields: Vec<String>,
    /// `${item.a.b}` or `${item[0]}`: not a matrix value.
    deep: bool,
    key: bool,
}

impl Uses {
    fn of(body: &Node) -> Uses {
        let mut uses = Uses::default();
        visit_strings(body, &mut |text| {
            for piece in template::parse(text).unwrap_or_default() {
                let Piece::Ref(reference) = piece else {
                    continue;
                };
                match (reference.path[0].as_str(), reference.path.len()) {
                    ("item", 1) => uses.whole_item = true,
                    ("item", 2) if !uses.fields.contains(&reference.path[1]) => {
                        uses.fields.push(reference.path[1].clone())
                    }
                    ("item", 2) => {}
                    ("item", _) => uses.deep = true,
                    ("key", 1) => uses.key = true,
                    ("key", _) => uses.deep = true,
                    _ => {}
                }
            }
        });
        uses
    }
}

/// Every string of a node, mapping keys included (DVC interpolates both).
fn visit_strings(node: &Node, visit: &mut dyn FnMut(&str)) {
    match &node.value {
        NodeValue::Scalar(scalar) => visit(&scalar.text),
        NodeValue::Seq(items) => items.iter().for_each(|item| visit_strings(item, visit)),
        NodeValue::Map(entries) => {
            for entry in entries {
                visit(&entry.key);
                visit_strings(&entry.value, visit);
            }
        }
    }
}

/// A value pipe's matrix takes and a command reads as DVC's text would:
/// plain for the shell, and none of the characters a stage name refuses.
fn matrix_value(node: &Node) -> Option<String> {
    let text = dvc_text(node).filter(|_| !is_collection(node) && !node.is_null())?;
    let fits = is_plain_value(&text) && !text.contains([',', '@', '/', '=']);
    fits.then_some(text)
}

fn distinct(values: &[String]) -> bool {
    values
        .iter()
        .enumerate()
        .all(|(index, value)| !values[..index].contains(value))
}

fn matrix_of(values: &[&Node], param: Option<&str>) -> Option<MatrixValues> {
    let texts: Option<Vec<String>> = values.iter().map(|node| matrix_value(node)).collect();
    let texts = texts.filter(|texts| distinct(texts))?;
    match param {
        Some(param) if values.iter().all(|node| same_text(node)) => {
            Some(MatrixValues::Param(param.to_string()))
        }
        _ => Some(MatrixValues::List(texts)),
    }
}

/// `foreach` as one pipe matrix key, when the body uses only the whole
/// item (of a list or a mapping) or only the key of a mapping.
fn foreach_matrix(
    data: &Node,
    param: Option<&str>,
    uses: &Uses,
) -> Option<(Binding, Vec<(String, MatrixValues)>)> {
    if uses.deep || !uses.fields.is_empty() {
        return None;
    }
    let matrix_binding = |item: bool, key: bool| Binding::Matrix {
        item: item.then(|| "${matrix.item}".to_string()),
        fields: Vec::new(),
        key: key.then(|| "${matrix.key}".to_string()),
    };
    match &data.value {
        NodeValue::Seq(items) if !uses.key => {
            let values = matrix_of(&items.iter().collect::<Vec<_>>(), param)?;
            Some((
                matrix_binding(true, false),
                vec![("item".to_string(), values)],
            ))
        }
        NodeValue::Map(entries) if uses.key && !uses.whole_item => {
            let keys: Vec<Node> = entries
                .iter()
                .map(|entry| text_node(&entry.key, entry.key_span))
                .collect();
            let values = matrix_of(&keys.iter().collect::<Vec<_>>(), None)?;
            Some((
                matrix_binding(false, true),
                vec![("key".to_string(), values)],
            ))
        }
        NodeValue::Map(entries) if !uses.key => {
            let values: Vec<&Node> = entries.iter().map(|entry| &entry.value).collect();
            let values = matrix_of(&values, None)?;
            Some((
                matrix_binding(true, false),
                vec![("item".to_string(), values)],
            ))
        }
        _ => None,
    }
}

/// A DVC matrix as pipe's, when every key is a name pipe takes, every
/// value a plain word, and the body uses `${item.KEY}` and `${key}` only.
fn matrix_matrix(
    axes: &[(String, Vec<Node>, Option<String>)],
    uses: &Uses,
) -> Option<(Binding, Vec<(String, MatrixValues)>)> {
    if uses.deep || uses.whole_item {
        return None;
    }
    let mut matrix = Vec::new();
    for (key, values, param) in axes {
        let identifier = key
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !identifier {
            return None;
        }
        matrix.push((
            key.clone(),
            matrix_of(&values.iter().collect::<Vec<_>>(), param.as_deref())?,
        ));
    }
    let fields: Vec<(String, String)> = axes
        .iter()
        .map(|(key, ..)| (key.clone(), format!("${{matrix.{key}}}")))
        .collect();
    let key = fields
        .iter()
        .map(|(_, text)| text.as_str())
        .collect::<Vec<_>>()
        .join("-");
    Some((
        Binding::Matrix {
            item: None,
            fields,
            key: Some(key),
        },
        matrix,
    ))
}

fn note_matrix_names(
    name: &str,
    base: &str,
    matrix: &[(String, MatrixValues)],
    span: Span,
    findings: &mut Findings,
) {
    let keys: Vec<String> = matrix
        .iter()
        .map(|(key, _)| format!("{key}=VALUE"))
        .collect();
    findings.changed(span, format!("stage `{name}`"), format!("a matrix stage here: DVC's `{name}@...` stages are named `{base}@{}` (`pipe run {base}` runs them all)", keys.join(",")));
}

/// DVC's members of a `foreach`: a mapping's keys, a list's values when
/// they are all scalars, else its indexes (`normalized_iterable`).
fn foreach_members(data: &Node) -> Vec<(String, Node, Option<Node>)> {
    match &data.value {
        NodeValue::Map(entries) => entries
            .iter()
            .map(|entry| {
                let key = text_node(&entry.key, entry.key_span);
                (entry.key.clone(), entry.value.clone(), Some(key))
            })
            .collect(),
        NodeValue::Seq(items) if items.iter().any(is_collection) => items
            .iter()
            .enumerate()
            .map(|(index, item)| (index.to_string(), item.clone(), None))
            .collect(),
        NodeValue::Seq(items) => items
            .iter()
            .map(|item| (dvc_text(item).unwrap_or_default(), item.clone(), None))
            .collect(),
        NodeValue::Scalar(_) => Vec::new(),
    }
}

/// DVC's members of a `matrix`: every combination, the last key varying
/// fastest, named by its values joined with `-` (`KEYi` for a value that
/// is a list or mapping); the item is the mapping of keys to values.
fn matrix_members(
    axes: &[(String, Vec<Node>, Option<String>)],
    span: Span,
) -> Vec<(String, Node, Option<Node>)> {
    let mut combinations: Vec<(Vec<String>, Vec<Entry>)> = vec![(Vec::new(), Vec::new())];
    for (key, values, _) in axes {
        let mut next = Vec::new();
        for (fragments, entries) in &combinations {
            for (index, value) in values.iter().enumerate() {
                let fragment = match is_collection(value) {
                    true => format!("{key}{index}"),
                    false => dvc_text(value).unwrap_or_default(),
                };
                let mut fragments = fragments.clone();
                fragments.push(fragment);
                let mut entries = entries.clone();
                entries.push(Entry {
                    key: key.clone(),
                    key_span: value.span,
                    value: value.clone(),
                });
                next.push((fragments, entries));
            }
        }
        combinations = next;
    }
    combinations
        .into_iter()
        .map(|(fragments, entries)| {
            let span = entries.first().map_or(span, |entry| entry.key_span);
            let key = fragments.join("-");
            let item = Node {
                value: NodeValue::Map(entries),
                span,
            };
            let key_node = text_node(&key, span);
            (key, item, Some(key_node))
        })
        .collect()
}

/// One stage per member, named `BASE-KEY` (pipe keeps `@` for its own
/// matrix names).
fn written_out(
    name: &str,
    base: &str,
    members: Vec<(String, Node, Option<Node>)>,
    span: Span,
    findings: &mut Findings,
) -> Vec<Planned> {
    let mut planned: Vec<Planned> = Vec::new();
    let mut names = Vec::new();
    for (key, item, key_node) in members {
        let mut stage = super::emit::stage_name(&format!("{base}-{key}"));
        while planned.iter().any(|other| other.name == stage) {
            stage.push('_');
        }
        names.push(format!("`{name}@{key}` is `{stage}`"));
        planned.push(Planned {
            name: stage,
            binding: Binding::Literal {
                item,
                key: key_node,
            },
            matrix: Vec::new(),
        });
    }
    findings.changed(span, format!("stage `{name}`"), format!("written out once per item, its values put in (pipe's matrix takes one list of plain words per key, each used whole): {}", names.join(", ")));
    planned
}

/// A string node (quoted, so that it reads as text whatever it holds).
pub(crate) fn text_node(text: &str, span: Span) -> Node {
    Node {
        value: NodeValue::Scalar(Scalar {
            text: text.to_string(),
            plain: false,
            verbatim_col: None,
            shared: false,
        }),
        span,
    }
}
