//! One DVC stage body as a pipe stage: `cmd` (a list joined with ` && `)
//! as `run`, `wdir` as a `cd` before it with every path made the
//! project's, `deps`, `params`, `outs`, `metrics` and `plots` with the
//! options pipe takes, `always_changed` as `always_run`; every other key
//! said as not carried.

use crate::pipefile::is_plain_value;
use crate::project_files::paths::{PathProblem, ProjectPath};
use crate::project_files::source::Span;
use crate::project_files::yaml::{Entry, Node, NodeValue, Resolved};

use super::emit::{OutEntry, PipeStage, Yaml};
use super::iterate::Planned;
use super::python_text::shlex_quote;
use super::read::Stop;
use super::report::Findings;
use super::template::{self, Place};
use super::vars::Vars;

/// What every stage of a conversion shares.
pub(crate) struct Shared<'a> {
    pub vars: &'a Vars,
    /// Whether this pipe has a `plots:` stage key.
    pub plots_as_key: bool,
}

/// Options of a DVC output pipe takes as they are: `cache` (false: the
/// user keeps the file in git), `persist: false`, and the annotations.
const KEPT_OPTIONS: [&str; 5] = ["desc", "type", "labels", "meta", "cache"];
/// What a DVC plot may say that pipe's `plots:` key takes.
const PLOT_PROPS: [&str; 6] = ["x", "y", "template", "title", "x_label", "y_label"];

/// Converts one planned stage of the DVC stage `dvc_name`.
pub(crate) struct StageConverter<'a> {
    pub shared: &'a Shared<'a>,
    pub dvc_name: &'a str,
    pub planned: &'a Planned,
    pub stage_vars: &'a [Entry],
}

impl StageConverter<'_> {
    pub(crate) fn convert(&self, body: &Node, findings: &mut Findings) -> Result<PipeStage, Stop> {
        let mut stage = PipeStage {
            name: self.planned.name.clone(),
            matrix: self.planned.matrix.clone(),
            plots_as_key: self.shared.plots_as_key,
            ..PipeStage::default()
        };
        let wdir = self.wdir(body, findings)?;
        let mut run = None;
        for entry in body.as_map().unwrap_or_default() {
            let value = &entry.value;
            match entry.key.as_str() {
                "cmd" => run = Some(self.cmd(value, findings)?),
                "wdir" | "vars" | "foreach" | "do" | "matrix" => {}
                "deps" => {
                    for item in self.strings(value, "deps")? {
                        if let Some(path) =
                            self.path(item, wdir.as_deref(), "dependency", findings)?
                        {
                            stage.deps.push(path);
                        }
                    }
                }
                "params" => self.params(value, wdir.as_deref(), &mut stage, findings)?,
                "outs" => self.outputs(value, wdir.as_deref(), false, &mut stage, findings)?,
                "metrics" => self.outputs(value, wdir.as_deref(), true, &mut stage, findings)?,
                "plots" => self.plots(value, wdir.as_deref(), &mut stage, findings)?,
                "frozen" | "locked" => {
                    if self.flag(entry)? {
                        findings.not_carried(entry.key_span, format!("`{}: true` of stage `{}`", entry.key, self.dvc_name), format!("pipe has no frozen stage: `{}` runs like any other (its outputs are cached and restored, not taken as they are). To keep DVC's outputs as they are, commit them to git and remove the stage from pipe.yaml; `pipe run STAGE ...` runs only the stages named and what they need", stage.name));
                    }
                }
                "always_changed" => stage.always_run = self.flag(entry)?,
                "desc" => {
                    let text = value.as_str().ok_or_else(|| {
                        Stop::At(
                            value.span,
                            format!("`desc` of stage `{}` must be text", self.dvc_name),
                        )
                    })?;
                    stage.desc = Some(self.rewrite(value, text, Place::Text, findings)?);
                }
                "meta" => findings.not_carried(
                    entry.key_span,
                    format!("`meta` of stage `{}`", self.dvc_name),
                    "pipe's stages have `desc:` and no other annotation: it stays in dvc.yaml",
                ),
                other => findings.not_carried(
                    entry.key_span,
                    format!("`{other}` of stage `{}`", self.dvc_name),
                    "not a key of DVC's stages that pipe knows",
                ),
            }
        }
        let Some(mut run) = run else {
            return Err(Stop::At(
                body.span,
                format!(
                    "stage `{}` has no `cmd` (DVC would refuse it too)",
                    self.dvc_name
                ),
            ));
        };
        if let Some(wdir) = &wdir {
            // pipe runs every command in the project root.
            let dir = match wdir.contains("${") || is_plain_value(wdir) {
                true => wdir.clone(),
                false => shlex_quote(wdir),
            };
            run = format!("cd {dir} && {run}");
        }
        stage.run = run;
        Ok(stage)
    }

    /// `text` of `node` rewritten for `place`, what was written otherwise
    /// said at its place.
    fn rewrite(
        &self,
        node: &Node,
        text: &str,
        place: Place,
        findings: &mut Findings,
    ) -> Result<String, Stop> {
        let resolve = |path: &[String]| {
            self.planned
                .binding
                .meaning(path, self.shared.vars, self.stage_vars)
        };
        let done = template::rewrite(text, place, &resolve)
            .map_err(|bad| Stop::At(span_in(node, bad.offset, bad.len), bad.message))?;
        for (offset, note) in done.notes {
            findings.changed(
                span_in(node, offset, 1),
                format!("stage `{}`", self.dvc_name),
                note,
            );
        }
        Ok(done.text)
    }

    fn cmd(&self, node: &Node, findings: &mut Findings) -> Result<String, Stop> {
        let commands = self.strings(node, "cmd")?;
        if commands.is_empty() {
            return Err(Stop::At(
                node.span,
                format!("`cmd` of stage `{}` is empty", self.dvc_name),
            ));
        }
        let mut run = Vec::new();
        for command in commands {
            let text = command.as_str().unwrap_or_default();
            run.push(self.rewrite(command, text, Place::Command, findings)?);
        }
        // DVC runs a list's commands in turn and stops at a failure.
        Ok(run.join(" && "))
    }

    fn wdir(&self, body: &Node, findings: &mut Findings) -> Result<Option<String>, Stop> {
        let Some(node) = body.get("wdir") else {
            return Ok(None);
        };
        let text = node.as_str().ok_or_else(|| {
            Stop::At(
                node.span,
                format!("`wdir` of stage `{}` must be a path", self.dvc_name),
            )
        })?;
        let wdir = self.rewrite(node, text, Place::Path, findings)?;
        if wdir.contains("${") {
            return Ok(Some(wdir));
        }
        match ProjectPath::new(&wdir) {
            Ok(wdir) => Ok(Some(wdir.into())),
            Err(PathProblem::IsRoot) => Ok(None),
            Err(_) => Err(Stop::At(node.span, format!("`wdir: {text}` of stage `{}` is outside the project: pipe runs commands in the project and tracks its files only", self.dvc_name))),
        }
    }

    /// A list of strings (or one string).
    fn strings<'n>(&self, node: &'n Node, field: &str) -> Result<Vec<&'n Node>, Stop> {
        let items: Vec<&Node> = match &node.value {
            NodeValue::Seq(items) => items.iter().collect(),
            _ if node.is_null() => Vec::new(),
            _ => vec![node],
        };
        for item in &items {
            if item.as_str().is_none() {
                return Err(Stop::At(
                    item.span,
                    format!(
                        "`{field}` of stage `{}` must be a list of strings, found {}",
                        self.dvc_name,
                        item.describe()
                    ),
                ));
            }
        }
        Ok(items)
    }

    fn flag(&self, entry: &Entry) -> Result<bool, Stop> {
        match entry.value.as_scalar().map(|scalar| scalar.resolve()) {
            Some(Resolved::Bool(flag)) => Ok(flag),
            _ => Err(Stop::At(
                entry.value.span,
                format!(
                    "`{}` of stage `{}` must be true or false",
                    entry.key, self.dvc_name
                ),
            )),
        }
    }

    /// A path of the stage, relative to its `wdir` in DVC, made the
    /// project's; `None` (said) for one pipe cannot track.
    fn path(
        &self,
        node: &Node,
        wdir: Option<&str>,
        what: &str,
        findings: &mut Findings,
    ) -> Result<Option<String>, Stop> {
        let text = node.as_str().unwrap_or_default();
        let path = self.rewrite(node, text, Place::Path, findings)?;
        let subject = format!("{what} `{text}` of stage `{}`", self.dvc_name);
        if path.contains("://") {
            findings.not_carried(node.span, subject, "a URL: pipe tracks the project's files; download it in a stage of its own (`curl -fsSL URL -o data/file`) and depend on that file");
            return Ok(None);
        }
        let joined = match wdir {
            Some(wdir) if !path.starts_with('/') => format!("{wdir}/{path}"),
            _ => path,
        };
        if joined.contains("${") {
            return Ok(Some(joined));
        }
        match ProjectPath::new(&joined) {
            Ok(path) => Ok(Some(path.into())),
            Err(_) => {
                findings.not_carried(node.span, subject, "outside the project: pipe hashes and records the project's files only; copy or link it into the project");
                Ok(None)
            }
        }
    }

    fn params(
        &self,
        node: &Node,
        wdir: Option<&str>,
        stage: &mut PipeStage,
        findings: &mut Findings,
    ) -> Result<(), Stop> {
        let items: Vec<&Node> = match &node.value {
            NodeValue::Seq(items) => items.iter().collect(),
            _ => vec![node],
        };
        // DVC's default params file is the stage's `wdir`'s params.yaml.
        let default_file = wdir.map_or("params.yaml".to_string(), |wdir| {
            format!("{wdir}/params.yaml")
        });
        for item in items {
            match &item.value {
                NodeValue::Scalar(_) if item.as_str().is_some() => {
                    let key = self.rewrite(
                        item,
                        item.as_str().unwrap_or_default(),
                        Place::Text,
                        findings,
                    )?;
                    self.param_keys(item, &default_file, &[key], stage, findings);
                }
                NodeValue::Map(files) => {
                    for file in files {
                        let key_node = super::iterate::text_node(&file.key, file.key_span);
                        let name = self.rewrite(&key_node, &file.key, Place::Text, findings)?;
                        let path = wdir.map_or(name.clone(), |wdir| format!("{wdir}/{name}"));
                        let keys: Vec<String> = match &file.value.value {
                            _ if file.value.is_null() => Vec::new(),
                            NodeValue::Seq(keys) => keys
                                .iter()
                                .filter_map(|key| key.as_str().map(str::to_string))
                                .collect(),
                            _ => {
                                return Err(Stop::At(
                                    file.value.span,
                                    format!(
                                    "the params of `{name}` in stage `{}` must be a list of keys",
                                    self.dvc_name
                                ),
                                ))
                            }
                        };
                        self.param_keys(&key_node, &path, &keys, stage, findings);
                    }
                }
                _ => {
                    return Err(Stop::At(
                        item.span,
                        format!(
                            "`params` of stage `{}` must list keys and `file: [keys]` mappings",
                            self.dvc_name
                        ),
                    ))
                }
            }
        }
        Ok(())
    }

    /// `keys` of the params file `file` (all of it when there are none).
    fn param_keys(
        &self,
        node: &Node,
        file: &str,
        keys: &[String],
        stage: &mut PipeStage,
        findings: &mut Findings,
    ) {
        let file = ProjectPath::new(file).map_or_else(|_| file.to_string(), String::from);
        let add_dep = |stage: &mut PipeStage| {
            if !stage.deps.contains(&file) {
                stage.deps.push(file.clone());
            }
        };
        if file != "params.yaml" {
            add_dep(stage);
            let what = match keys.is_empty() {
                true => format!("params file `{file}` of stage `{}`", self.dvc_name),
                false => format!(
                    "params `{}` of `{file}` in stage `{}`",
                    keys.join("`, `"),
                    self.dvc_name
                ),
            };
            findings.not_carried(node.span, what, format!("pipe reads params from params.yaml beside pipe.yaml only: the stage depends on all of `{file}` instead (any change reruns it), and `-S` cannot set these values; move them into params.yaml to make them params"));
            return;
        }
        if keys.is_empty() {
            add_dep(stage);
            findings.changed(node.span, format!("all of params.yaml in stage `{}`", self.dvc_name), "the stage depends on the file (any change to it, a comment too, reruns the stage) rather than on each value");
            return;
        }
        let params_yaml = self.shared.vars.params_yaml.as_ref();
        for key in keys {
            let found = params_yaml.is_some_and(|root| {
                key.split('.')
                    .try_fold(root, |node, step| node.get(step))
                    .is_some()
            });
            if !found {
                findings.not_carried(
                    node.span,
                    format!("param `{key}` of stage `{}`", self.dvc_name),
                    "params.yaml has no such key (DVC's `repro` would stop at it too)",
                );
            } else if !stage.params.contains(key) {
                stage.params.push(key.clone());
            }
        }
    }

    /// The entries of `outs` or `metrics`: a path, or `path: {options}`.
    fn outputs(
        &self,
        node: &Node,
        wdir: Option<&str>,
        metrics: bool,
        stage: &mut PipeStage,
        findings: &mut Findings,
    ) -> Result<(), Stop> {
        let field = if metrics { "metrics" } else { "outs" };
        for (path_node, options) in self.entries(node, field)? {
            let Some(path) = self.path(&path_node, wdir, "output", findings)? else {
                continue;
            };
            let options = self.out_options(&path, options, findings);
            let entry = OutEntry { path, options };
            if metrics && !entry.path.ends_with(".json") && !entry.path.contains("${") {
                findings.not_carried(path_node.span, format!("metrics file `{}` of stage `{}`", entry.path, self.dvc_name), "pipe reads metrics from JSON files: this one is an output (cached and restored) that `pipe show`, `diff` and `compare` do not read; write the metrics as JSON too to compare them");
                stage.outs.push(entry);
            } else if metrics {
                stage.metrics.push(entry);
            } else {
                stage.outs.push(entry);
            }
        }
        Ok(())
    }

    /// Each item of an outputs list: its path as a node, and its options.
    fn entries<'n>(
        &self,
        node: &'n Node,
        field: &str,
    ) -> Result<Vec<(Node, Option<&'n Node>)>, Stop> {
        let items: Vec<&Node> = match &node.value {
            NodeValue::Seq(items) => items.iter().collect(),
            _ if node.is_null() => Vec::new(),
            _ => vec![node],
        };
        let mut entries = Vec::new();
        for item in items {
            match (&item.value, item.as_map()) {
                (NodeValue::Scalar(_), _) if item.as_str().is_some() => {
                    entries.push((item.clone(), None))
                }
                (_, Some([entry])) => entries.push((
                    super::iterate::text_node(&entry.key, entry.key_span),
                    Some(&entry.value),
                )),
                _ => {
                    return Err(Stop::At(
                        item.span,
                        format!(
                        "an entry of `{field}` in stage `{}` must be a path or `path: {{options}}`",
                        self.dvc_name
                    ),
                    ))
                }
            }
        }
        Ok(entries)
    }

    /// The options pipe keeps; the others said.
    fn out_options(
        &self,
        path: &str,
        options: Option<&Node>,
        findings: &mut Findings,
    ) -> Vec<(String, Yaml)> {
        let mut kept = Vec::new();
        for option in options.and_then(Node::as_map).unwrap_or_default() {
            let subject = format!(
                "`{}` of output `{path}` in stage `{}`",
                option.key, self.dvc_name
            );
            let truth = match option.value.as_scalar().map(|scalar| scalar.resolve()) {
                Some(Resolved::Bool(flag)) => Some(flag),
                _ => None,
            };
            match option.key.as_str() {
                "persist" if truth == Some(true) => findings.not_carried(option.key_span, subject, "pipe deletes a stage's outputs before it runs, so that a file left by an earlier run never passes for a new result; a stage that builds on earlier work reads it as a dependency (another stage's output)"),
                "persist" => {}
                "remote" | "push" => findings.not_carried(option.key_span, subject, "pipe has one remote cache for every result (`cache: { remote: ... }` or `--remote`), all of a stage's outputs or none"),
                "checkpoint" => findings.not_carried(option.key_span, subject, "DVC's checkpoints are gone from DVC too; pipe's training stages resume by themselves"),
                key if KEPT_OPTIONS.contains(&key) || PLOT_PROPS.contains(&key) => {
                    if KEPT_OPTIONS.contains(&key) {
                        kept.push((key.to_string(), Yaml::from_node(&option.value)));
                    }
                }
                other => findings.not_carried(option.key_span, format!("`{other}` of output `{path}` in stage `{}`", self.dvc_name), "not an output option pipe knows"),
            }
        }
        kept
    }

    /// DVC's stage plots: each file an output of the stage, and a plot of
    /// it under `plots:` (or in a comment, where this pipe has no such
    /// key).
    fn plots(
        &self,
        node: &Node,
        wdir: Option<&str>,
        stage: &mut PipeStage,
        findings: &mut Findings,
    ) -> Result<(), Stop> {
        for (path_node, options) in self.entries(node, "plots")? {
            let Some(path) = self.path(&path_node, wdir, "plot", findings)? else {
                continue;
            };
            let props = match options.map(|options| &options.value) {
                Some(NodeValue::Seq(many)) => {
                    if many.len() > 1 {
                        findings.not_carried(many[1].span, format!("the second and later plots of `{path}` in stage `{}`", self.dvc_name), "pipe draws one plot a file: list several columns in one plot (`y: [a, b]`)");
                    }
                    many.first()
                }
                _ => options,
            };
            let plot: Vec<(String, Yaml)> = props
                .and_then(Node::as_map)
                .unwrap_or_default()
                .iter()
                .filter(|option| PLOT_PROPS.contains(&option.key.as_str()))
                .map(|option| (option.key.clone(), Yaml::from_node(&option.value)))
                .collect();
            let out_options = self.out_options(&path, props, findings);
            let declared = stage
                .outs
                .iter()
                .chain(&stage.metrics)
                .any(|out| out.path == path);
            if !declared {
                stage.outs.push(OutEntry {
                    path: path.clone(),
                    options: out_options,
                });
            }
            if !self.shared.plots_as_key {
                findings.not_carried(path_node.span, format!("plot `{path}` of stage `{}`", self.dvc_name), "this pipe has no `plots:` stage key: the file is an output of the stage, and the plot's settings are a comment in pipe.yaml");
            }
            stage.plots.push(OutEntry {
                path,
                options: plot,
            });
        }
        Ok(())
    }
}

/// The span of `len` characters at `offset` in a one-line scalar, else
/// the node's.
fn span_in(node: &Node, offset: usize, len: usize) -> Span {
    match node.as_scalar().and_then(|scalar| scalar.verbatim_col) {
        Some(col) => Span {
            col: col + offset,
            len: len.max(1),
            ..node.span
        },
        None => node.span,
    }
}
