//! The pipe.yaml text: the converted stages written in pipe's own style
//! (flow lists where they fit on a line, block forms otherwise), every
//! string quoted where YAML would read it as something else, and what was
//! not carried said as comments at the stage it belongs to.

use crate::project_files::yaml::{resolve_plain, Entry, Node, NodeValue, Resolved};

/// A YAML value to write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Yaml {
    /// A string, quoted when it would not read back as this string.
    Str(String),
    /// A scalar written as it is (a number, a boolean).
    Plain(String),
    Seq(Vec<Yaml>),
    Map(Vec<(String, Yaml)>),
}

impl Yaml {
    /// A value of `dvc.yaml` or `params.yaml` as it was written.
    pub(crate) fn from_node(node: &Node) -> Yaml {
        match &node.value {
            NodeValue::Scalar(scalar) => match scalar.resolve() {
                Resolved::Str => Yaml::Str(scalar.text.clone()),
                _ if scalar.plain => Yaml::Plain(scalar.text.clone()),
                _ => Yaml::Str(scalar.text.clone()),
            },
            NodeValue::Seq(items) => Yaml::Seq(items.iter().map(Yaml::from_node).collect()),
            NodeValue::Map(entries) => Yaml::Map(entries_yaml(entries)),
        }
    }
}

pub(crate) fn entries_yaml(entries: &[Entry]) -> Vec<(String, Yaml)> {
    entries
        .iter()
        .map(|entry| (entry.key.clone(), Yaml::from_node(&entry.value)))
        .collect()
}

/// The values of a matrix key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum MatrixValues {
    /// Each value as DVC prints it (plain words, so written bare).
    List(Vec<String>),
    /// A list param: `${params.X}`.
    Param(String),
}

/// An output (or metrics file, or plot) and its options.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OutEntry {
    pub path: String,
    pub options: Vec<(String, Yaml)>,
}

/// A stage as it is written in pipe.yaml.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PipeStage {
    pub name: String,
    /// Comment lines above the stage's keys.
    pub comments: Vec<String>,
    pub desc: Option<String>,
    pub matrix: Vec<(String, MatrixValues)>,
    pub run: String,
    pub deps: Vec<String>,
    pub params: Vec<String>,
    pub outs: Vec<OutEntry>,
    pub metrics: Vec<OutEntry>,
    pub plots: Vec<OutEntry>,
    /// Whether `plots:` is written as a key (pipe has it) or as a comment.
    pub plots_as_key: bool,
    pub always_run: bool,
}

/// The whole file.
pub(crate) fn pipe_yaml(
    header: &[String],
    params: &[(String, Yaml)],
    stages: &[PipeStage],
) -> String {
    let mut text = String::new();
    for line in header {
        push_comment(&mut text, "", line);
    }
    if !params.is_empty() {
        text.push_str("params:\n");
        for (key, value) in params {
            write_entry(&mut text, 1, key, value);
        }
    }
    text.push_str("stages:\n");
    for (index, stage) in stages.iter().enumerate() {
        if index > 0 {
            text.push('\n');
        }
        write_stage(&mut text, stage);
    }
    text
}

/// A report stage: the run's page, with its metrics and every plot the
/// stages declare (`dvc plots show`'s place here).
pub(crate) fn report_stage(name: &str) -> String {
    format!(
        "\n  {}:\n    desc: \"One HTML page of the run, its metrics, params and plots (`pipe show` says where)\"\n    uses: report/html@1\n",
        key(name)
    )
}

fn write_stage(text: &mut String, stage: &PipeStage) {
    text.push_str(&format!("  {}:\n", key(&stage.name)));
    for comment in &stage.comments {
        push_comment(text, "    ", comment);
    }
    if let Some(desc) = &stage.desc {
        write_entry(text, 2, "desc", &Yaml::Str(desc.clone()));
    }
    if !stage.matrix.is_empty() {
        text.push_str("    matrix:\n");
        for (name, values) in &stage.matrix {
            let value = match values {
                MatrixValues::List(values) => Yaml::Seq(
                    values
                        .iter()
                        .map(|value| Yaml::Plain(value.clone()))
                        .collect(),
                ),
                MatrixValues::Param(param) => Yaml::Str(format!("${{params.{param}}}")),
            };
            write_entry(text, 3, name, &value);
        }
    }
    write_entry(text, 2, "run", &Yaml::Str(stage.run.clone()));
    let strings = |items: &[String]| Yaml::Seq(items.iter().cloned().map(Yaml::Str).collect());
    if !stage.deps.is_empty() {
        write_entry(text, 2, "deps", &strings(&stage.deps));
    }
    if !stage.params.is_empty() {
        write_entry(text, 2, "params", &strings(&stage.params));
    }
    for (field, entries) in [("outs", &stage.outs), ("metrics", &stage.metrics)] {
        if !entries.is_empty() {
            write_entry(text, 2, field, &outputs(entries));
        }
    }
    if !stage.plots.is_empty() {
        if stage.plots_as_key {
            write_entry(text, 2, "plots", &outputs(&stage.plots));
        } else {
            let mut block = String::new();
            write_entry(&mut block, 0, "plots", &outputs(&stage.plots));
            push_comment(text, "    ", "plots, for pipe's `plots:` stage key once this pipe has it (`pipe init --from-dvc` writes them as a key then); their files are outputs above:");
            for line in block.lines() {
                text.push_str(&format!("    # {line}\n"));
            }
        }
    }
    if stage.always_run {
        write_entry(text, 2, "always_run", &Yaml::Plain("true".to_string()));
    }
}

fn outputs(entries: &[OutEntry]) -> Yaml {
    Yaml::Seq(
        entries
            .iter()
            .map(|entry| match entry.options.is_empty() {
                true => Yaml::Str(entry.path.clone()),
                false => Yaml::Map(vec![(entry.path.clone(), Yaml::Map(entry.options.clone()))]),
            })
            .collect(),
    )
}

/// `# line`, wrapped at about 100 columns.
fn push_comment(text: &mut String, indent: &str, line: &str) {
    let mut current = String::new();
    for word in line.split(' ') {
        if !current.is_empty() && indent.len() + current.len() + word.len() > 96 {
            text.push_str(&format!("{indent}# {current}\n"));
            current = "  ".to_string();
        }
        if !current.is_empty() && !current.ends_with("  ") {
            current.push(' ');
        }
        current.push_str(word);
    }
    text.push_str(&format!("{indent}# {current}\n").replace(" \n", "\n"));
}

/// `key: value` at `depth` (two spaces a level), in flow style when it
/// fits on the line.
fn write_entry(text: &mut String, depth: usize, name: &str, value: &Yaml) {
    let indent = "  ".repeat(depth);
    let name = key(name);
    match value {
        Yaml::Str(string) if string.contains('\n') => {
            text.push_str(&format!(
                "{indent}{name}: {}\n",
                block_scalar(string, &indent)
            ));
        }
        // A list of mappings reads best as DVC writes it: one item a line.
        Yaml::Seq(items)
            if !items.is_empty()
                && (!fits(&indent, &name, value)
                    || items.iter().any(|item| matches!(item, Yaml::Map(_)))) =>
        {
            text.push_str(&format!("{indent}{name}:\n"));
            for item in items {
                write_item(text, depth + 1, item);
            }
        }
        Yaml::Map(entries) if !fits(&indent, &name, value) && !entries.is_empty() => {
            text.push_str(&format!("{indent}{name}:\n"));
            for (key, value) in entries {
                write_entry(text, depth + 1, key, value);
            }
        }
        Yaml::Str(string) => text.push_str(&format!("{indent}{name}: {}\n", scalar(string, false))),
        _ => text.push_str(&format!("{indent}{name}: {}\n", flow(value))),
    }
}

fn fits(indent: &str, name: &str, value: &Yaml) -> bool {
    indent.len() + name.chars().count() + 2 + flow(value).chars().count() <= 100
}

/// `- item` at `depth`.
fn write_item(text: &mut String, depth: usize, item: &Yaml) {
    let indent = "  ".repeat(depth);
    match item {
        Yaml::Map(entries) if entries.len() == 1 && fits(&indent, "- ", &entries[0].1) => {
            // `- path: {options}`, DVC's way.
            let (key, value) = &entries[0];
            text.push_str(&format!(
                "{indent}- {}: {}\n",
                scalar(key, false),
                flow(value)
            ));
        }
        Yaml::Map(entries) if !entries.is_empty() && !fits(&indent, "-", item) => {
            // The first entry on the dash's line, the others under it.
            let mut block = String::new();
            for (key, value) in entries {
                write_entry(&mut block, depth + 1, key, value);
            }
            let block = block.replacen(&format!("{indent}  "), &format!("{indent}- "), 1);
            text.push_str(&block);
        }
        Yaml::Str(string) if string.contains('\n') => {
            text.push_str(&format!("{indent}- {}\n", block_scalar(string, &indent)));
        }
        Yaml::Str(string) => text.push_str(&format!("{indent}- {}\n", scalar(string, false))),
        _ => text.push_str(&format!("{indent}- {}\n", flow(item))),
    }
}

/// A value on one line, in flow style.
fn flow(value: &Yaml) -> String {
    match value {
        Yaml::Str(string) => scalar(string, true),
        Yaml::Plain(plain) => plain.clone(),
        Yaml::Seq(items) => {
            let items: Vec<String> = items.iter().map(flow).collect();
            format!("[{}]", items.join(", "))
        }
        Yaml::Map(entries) => {
            let entries: Vec<String> = entries
                .iter()
                .map(|(name, value)| format!("{}: {}", scalar(name, true), flow(value)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
    }
}

/// A mapping key: bare where it reads back as itself.
fn key(name: &str) -> String {
    scalar(name, false)
}

/// A string, bare where YAML reads it back as this string (in a flow
/// collection when `in_flow`), else double-quoted, every character YAML
/// does not take raw escaped (`crate::pipeline::yaml_quoted`).
pub(crate) fn scalar(text: &str, in_flow: bool) -> String {
    if is_bare(text, in_flow) {
        text.to_string()
    } else {
        crate::pipeline::yaml_quoted(text)
    }
}

fn is_bare(text: &str, in_flow: bool) -> bool {
    let Some(first) = text.chars().next() else {
        return false;
    };
    let indicator = "-?:,[]{}#&*!|>'\"%@`".contains(first);
    let flow_special = in_flow && text.contains([',', '[', ']', '{', '}']);
    !indicator
        && !flow_special
        && text.trim() == text
        && !text.contains(": ")
        && !text.contains(" #")
        && !text.ends_with(':')
        && !text.chars().any(char::is_control)
        && resolve_plain(text) == Resolved::Str
}

/// A string of several lines as a literal block (`|-`), when YAML gives
/// it back as it is; a quoted string otherwise.
fn block_scalar(text: &str, indent: &str) -> String {
    let body = text.strip_suffix('\n').unwrap_or(text);
    let keeps = !body.is_empty()
        && !body.starts_with([' ', '\t'])
        && !body.ends_with('\n')
        && body
            .lines()
            .all(|line| line.trim_end() == line && !line.contains('\t'))
        && !body.chars().any(|ch| ch.is_control() && ch != '\n');
    if !text.contains('\n') || !keeps {
        return scalar(text, false);
    }
    let chomp = if text.ends_with('\n') { "|" } else { "|-" };
    let mut block = chomp.to_string();
    for line in body.split('\n') {
        block.push('\n');
        if !line.is_empty() {
            block.push_str(indent);
            block.push_str("  ");
            block.push_str(line);
        }
    }
    block
}

/// A DVC stage name as a pipe stage name: letters, digits, `_`, `.`,
/// `-`, starting with a letter, digit or `_`; anything else is `_`.
pub(crate) fn stage_name(name: &str) -> String {
    let mut pipe: String = name
        .chars()
        .map(
            |ch| match ch.is_ascii_alphanumeric() || matches!(ch, '_' | '.' | '-') {
                true => ch,
                false => '_',
            },
        )
        .collect();
    if !pipe.starts_with(|ch: char| ch.is_ascii_alphanumeric() || ch == '_') {
        pipe.insert(0, '_');
    }
    pipe
}
