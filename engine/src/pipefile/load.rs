//! The pipeline file as a whole: reading it safely, top-level keys,
//! params, then the stages.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::catalog_source::CatalogSource;
use super::context::Context;
use super::declare::{self, is_valid_name};
use super::file::name_from_file_stem;
use super::override_sites::{OverrideSites, SiteEdits, UnseenOverride};
use super::{params, stages};
use crate::dag::Dag;
use crate::metrics::Direction;
use crate::overrides::ParamOverride;
use crate::params_override;
use crate::pipeline::Pipeline;
use crate::project_config::{cache_section, executor_section};
use crate::project_files::collect::Diagnostics;
use crate::project_files::source::{FileId, Sources, Span};
use crate::project_files::yaml::{self, Entry, Node, NodeValue, MAX_FILE_BYTES};
use crate::suggest::{did_you_mean, hint_with_suggestion};
use crate::{Diagnostic, EngineError, Result};

const TOP_LEVEL_KEYS: [&str; 8] = [
    "name",
    "params",
    "stages",
    "cache",
    "directions",
    "key_metrics",
    "executor",
    "resources",
];

const MINIMAL_PIPELINE: &str =
    "stages:\n  train:\n    run: python train.py\n    deps: [train.py]\n    outs: [model.pt]";

/// A pipeline and its DAG, built once.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub pipeline: Pipeline,
    pub dag: Dag,
    /// What is worth saying about a file that loaded (`warning[...]`).
    pub warnings: Vec<Diagnostic>,
}

/// Reads, validates, expands and resolves the pipeline at `file`.
/// `overrides` are the `-S` settings, in order. Every
/// problem found is reported at once as `EngineError::Spec`, located in the
/// file.
pub fn load(
    file: &Path,
    overrides: &[ParamOverride],
    catalogs: &dyn CatalogSource,
) -> Result<Loaded> {
    let mut sources = Sources::default();
    let mut diagnostics = Diagnostics::default();

    let text = read_source(file)?;
    let file_id = sources.add(Some(file.to_path_buf()), text);
    let start = Span {
        file: file_id,
        line: 1,
        col: 1,
        len: 1,
    };
    let root = parse_nonempty(&sources, file_id, start)?;
    let Some(entries) = root.as_map() else {
        return Err(spec_error(
            Diagnostic::new(
                "bad-type",
                format!(
                    "the pipeline file must be a mapping with `stages:`, found {}",
                    root.describe()
                ),
            )
            .at(sources.location(root.span))
            .with_hint(format!("write e.g.\n{MINIMAL_PIPELINE}")),
        ));
    };
    report_unknown_top_level_keys(entries, &sources, &mut diagnostics);
    let name = pipeline_name(file, &root, &sources, &mut diagnostics);

    let project_root = project_root(file);
    let Some(LoadedParams {
        merged: merged_params,
        edits:
            SiteEdits {
                params_file,
                pipeline_file: pipeline_file_params,
            },
        unseen: unseen_overrides,
        file: params_file_id,
    }) = load_params(
        file,
        &project_root,
        &root,
        overrides,
        &mut sources,
        &mut diagnostics,
    )
    else {
        return Err(EngineError::Spec(diagnostics.into_vec()));
    };
    let cache = root
        .get("cache")
        .map(|node| cache_section::parse(node, &sources, &mut diagnostics))
        .unwrap_or_default();
    let executor = root
        .get("executor")
        .and_then(|node| executor_section::parse(node, &sources, &mut diagnostics));
    let mut directions = root
        .get("directions")
        .map(|node| metric_directions(node, &sources, &mut diagnostics))
        .unwrap_or_default();
    if let Some(node) = root.get("key_metrics") {
        // Recorded with the directions: a metric named there is key, with
        // the direction declared for it, if any.
        for name in key_metrics(node, &sources, &mut diagnostics) {
            directions.entry(name).or_insert(Direction::Unknown);
        }
    }

    check_pipeline_name(&root, &name, &sources, &mut diagnostics);
    let stages = match root.get("stages") {
        Some(node) => stages::build(
            &Context {
                sources: &sources,
                params: &merged_params,
                root: &project_root,
                pipeline: &name,
                catalogs,
                default_resources: root.get("resources"),
                unseen_overrides: &unseen_overrides,
                params_file: params_file_id,
            },
            node,
            &mut diagnostics,
        )?,
        None => {
            diagnostics.push(
                Diagnostic::new("missing-stages", "the pipeline file has no `stages`")
                    .at(sources.location(entries.first().map_or(start, |entry| entry.key_span)))
                    .with_hint(format!("add the stages to run, e.g.\n{MINIMAL_PIPELINE}")),
            );
            Vec::new()
        }
    };
    let warnings = diagnostics.take_warnings();
    if !diagnostics.is_empty() {
        return Err(EngineError::Spec(diagnostics.into_vec()));
    }

    let pipeline = Pipeline {
        name,
        file: file.to_path_buf(),
        root: project_root,
        params: params::to_json(&merged_params),
        stages,
        link: cache.link,
        link_at: cache.link_at,
        remote: cache.remote,
        directions,
        executor,
        params_file,
        pipeline_file_params,
        workspaces: Vec::new(),
    };
    // A cycle is a mistake in the file, so it is reported by `load` too.
    let dag = Dag::build(&pipeline)?;
    Ok(Loaded {
        pipeline,
        dag,
        warnings,
    })
}

/// The file's YAML tree, which must hold something.
fn parse_nonempty(sources: &Sources, file_id: FileId, start: Span) -> Result<Node> {
    let root = yaml::parse(sources, file_id).map_err(EngineError::Spec)?;
    match root {
        Some(root) if !root.is_null() => Ok(root),
        _ => Err(spec_error(
            Diagnostic::new("empty-file", "the pipeline file is empty")
                .at(sources.location(start))
                .with_hint(format!(
                    "a pipeline needs at least one stage, e.g.\n{MINIMAL_PIPELINE}"
                )),
        )),
    }
}

/// Each top-level key pipe does not know, with what it is called here
/// when it is DVC's or a stage's.
fn report_unknown_top_level_keys(
    entries: &[Entry],
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) {
    for entry in entries
        .iter()
        .filter(|entry| !TOP_LEVEL_KEYS.contains(&entry.key.as_str()))
    {
        let known = format!("top-level keys: {}", TOP_LEVEL_KEYS.join(", "));
        let hint = match entry.key.as_str() {
            "vars" => format!("DVC's `vars` are `params` in pipe; {known}"),
            key if declare::STAGE_KEYS.contains(&key) => {
                format!("`{key}` belongs inside a stage, under `stages: NAME:`; {known}")
            }
            key => hint_with_suggestion(did_you_mean(key, TOP_LEVEL_KEYS), known),
        };
        diagnostics.push(
            Diagnostic::new(
                "unknown-key",
                format!("unknown top-level key `{}`", entry.key),
            )
            .at(sources.location(entry.key_span))
            .with_hint(hint),
        );
    }
}

/// `name:`, else the file's name; empty when `name:` is not text.
fn pipeline_name(
    file: &Path,
    root: &Node,
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) -> String {
    match root.get("name") {
        None => file.file_stem().map_or_else(
            || "pipeline".to_string(),
            |stem| name_from_file_stem(&stem.to_string_lossy()),
        ),
        Some(node) => match node
            .as_scalar()
            .filter(|scalar| !scalar.text.is_empty() && !node.is_null())
        {
            Some(scalar) => scalar.text.clone(),
            None => {
                diagnostics.push(
                    Diagnostic::new(
                        "bad-type",
                        format!("`name` must be text, found {}", node.describe()),
                    )
                    .at(sources.location(node.span))
                    .with_hint("write e.g. `name: imdb`, or remove `name` to use the file name"),
                );
                String::new()
            }
        },
    }
}

/// A `name:` written in the file must make a directory name; one taken
/// from the file's name was made one already.
fn check_pipeline_name(root: &Node, name: &str, sources: &Sources, diagnostics: &mut Diagnostics) {
    if let Some(node) = root
        .get("name")
        .filter(|_| !name.is_empty() && !is_valid_name(name))
    {
        diagnostics.push(
            Diagnostic::new("bad-pipeline-name", format!("invalid pipeline name `{name}`"))
                .at(sources.location(node.span))
                .with_hint(format!(
                    "the name places the pipeline's outputs under `{}/NAME/`: use letters, digits, `_`, `.` and `-`, starting with a letter, digit or `_`",
                    crate::project::OUTPUT_DIR,
                )),
        );
    }
}

fn spec_error(diagnostic: Diagnostic) -> EngineError {
    EngineError::Spec(vec![diagnostic])
}

fn project_root(file: &Path) -> PathBuf {
    let parent = file
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let directory = parent
        .canonicalize()
        .or_else(|_| std::path::absolute(parent))
        .unwrap_or_else(|_| parent.to_path_buf());
    // `pipelines/imdb.yaml` in a repository runs from the repository root,
    // as `dvc.yaml` does: paths in the file are relative to the project.
    crate::project::Project::find_root(&directory)
}

/// The file's text, refusing what is too big to be a pipeline or is not
/// UTF-8 before the YAML parser sees it.
pub(crate) fn read_source(file: &Path) -> Result<String> {
    let bytes = match yaml::read_bounded(file) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(spec_error(
                Diagnostic::new("file-not-found", format!("pipeline file `{}` does not exist", file.display()))
                    .with_hint("run pipe in the project directory, or pass the pipeline file, e.g. `pipe run pipelines/train.yaml`"),
            ))
        }
        Err(error) => return Err(EngineError::io(file, error)),
    };
    let located = |line: usize, col: usize, source_line: String| {
        Some(crate::Location {
            file: file.into(),
            line,
            col,
            len: 1,
            source_line: source_line.into(),
        })
    };
    if bytes.len() as u64 > MAX_FILE_BYTES {
        let first_line: String = String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        return Err(spec_error(
            Diagnostic::new("file-too-large", format!("`{}` is larger than {} MiB", file.display(), MAX_FILE_BYTES / (1024 * 1024)))
                .at(located(1, 1, first_line))
                .with_hint("a pipeline file describes stages; keep data in files that stages read (`deps:`), and generate sweeps with `matrix:`"),
        ));
    }
    match String::from_utf8(bytes) {
        Ok(text) => Ok(text
            .strip_prefix('\u{feff}')
            .map(str::to_string)
            .unwrap_or(text)),
        Err(error) => {
            let valid = &error.as_bytes()[..error.utf8_error().valid_up_to()];
            let valid = String::from_utf8_lossy(valid);
            let line = valid.matches('\n').count() + 1;
            let line_start = valid.rfind('\n').map_or(0, |index| index + 1);
            let col = valid[line_start..].chars().count() + 1;
            Err(spec_error(
                Diagnostic::new(
                    "not-utf8",
                    format!("`{}` is not valid UTF-8", file.display()),
                )
                .at(located(line, col, valid[line_start..].to_string()))
                .with_hint("save the file as UTF-8"),
            ))
        }
    }
}

/// The merged params, what `-S` writes into `params.yaml` for a run, the
/// overrides a command reading that file would not see, and the file's
/// place among the sources.
struct LoadedParams {
    merged: Node,
    edits: SiteEdits,
    unseen: Vec<UnseenOverride>,
    file: Option<FileId>,
}

/// Inline params, then `params.yaml` beside the file, then `-S`. `None`
/// when `params.yaml` cannot be read: every param reference would then be
/// reported as unknown, which helps nobody.
fn load_params(
    file: &Path,
    project_root: &Path,
    root: &Node,
    overrides: &[ParamOverride],
    sources: &mut Sources,
    diagnostics: &mut Diagnostics,
) -> Option<LoadedParams> {
    let empty = |span: Span| Node {
        value: NodeValue::Map(Vec::new()),
        span,
    };
    let mut merged = match root.get("params") {
        None => empty(root.span),
        Some(node) if node.is_null() => empty(node.span),
        Some(node) if node.as_map().is_some() => node.clone(),
        Some(node) => {
            diagnostics.push(
                Diagnostic::new(
                    "bad-type",
                    format!("`params` must be a mapping, found {}", node.describe()),
                )
                .at(sources.location(node.span))
                .with_hint("write e.g.\nparams:\n  seed: 123\n  train: { lr: 5.0e-5 }"),
            );
            empty(node.span)
        }
    };

    // Where an unknown top-level `-S` key is shown: the file's `params:`,
    // else the first key of `params.yaml`.
    let mut params_at = root
        .as_map()
        .and_then(|entries| entries.iter().find(|entry| entry.key == "params"))
        .map(|entry| entry.key_span);
    let params_file = file.with_file_name("params.yaml");
    let mut params_file_id = None;
    if yaml::present(&params_file) && params_file.file_name() != file.file_name() {
        match read_source(&params_override::readable(&params_file, project_root)) {
            Err(EngineError::Spec(found)) => {
                diagnostics.extend(found);
                return None;
            }
            Err(other) => {
                diagnostics.push(
                    Diagnostic::new(
                        "params-unreadable",
                        format!("cannot read `{}`: {other}", params_file.display()),
                    )
                    .with_hint("params.yaml beside the pipeline file must be a readable regular file: check its permissions, or replace it with one"),
                );
                return None;
            }
            Ok(text) => {
                let id: FileId = sources.add(Some(params_file.clone()), text);
                params_file_id = Some(id);
                match yaml::parse(sources, id) {
                    Err(found) => {
                        diagnostics.extend(found);
                        return None;
                    }
                    Ok(None) => {}
                    Ok(Some(node)) if node.is_null() => {}
                    Ok(Some(node)) if node.as_map().is_some() => {
                        params_at = params_at.or_else(|| {
                            node.as_map()
                                .and_then(|entries| entries.first())
                                .map(|entry| entry.key_span)
                        });
                        params::merge(&mut merged, node);
                    }
                    Ok(Some(node)) => {
                        diagnostics.push(
                            Diagnostic::new(
                                "bad-type",
                                format!(
                                    "`{}` must be a mapping of params, found {}",
                                    params_file.display(),
                                    node.describe()
                                ),
                            )
                            .at(sources.location(node.span))
                            .with_hint("write e.g.\nseed: 123\ntrain:\n  lr: 5.0e-5"),
                        );
                        return None;
                    }
                }
            }
        }
    }

    let context = params::OverrideContext {
        params_at,
        stages: root.get("stages"),
    };
    // Edits name the file absolute: a stage's dependency on it is found by
    // its path.
    let params_file = params_override::absolute(&params_file);
    let mut sites = OverrideSites::new(
        params_file_id.map(|id| (params_file, id)),
        (file.to_path_buf(), root.span.file),
        sources,
    );
    for setting in overrides {
        let before = sites.before(&merged, setting, sources);
        match params::apply_override(&mut merged, &context, setting, sources) {
            Ok(()) => sites.after(before, &merged, setting),
            Err(diagnostic) => diagnostics.push(diagnostic),
        }
    }
    let (edits, unseen) = sites.finish(sources);
    Some(LoadedParams {
        merged,
        edits,
        unseen,
        file: params_file_id,
    })
}

/// `key_metrics: [evaluate.accuracy, train.train_seconds]`: the metrics
/// `compare`, `diff` and `show` lead with.
fn key_metrics(node: &Node, sources: &Sources, diagnostics: &mut Diagnostics) -> Vec<String> {
    let hint = "write e.g. `key_metrics: [evaluate.accuracy, train.train_seconds]`, a metric as `STAGE.METRIC` or `METRIC`";
    let items: Vec<&Node> = match &node.value {
        NodeValue::Seq(items) => items.iter().collect(),
        NodeValue::Scalar(_) if node.as_str().is_some() => vec![node],
        _ => {
            diagnostics.push(
                Diagnostic::new(
                    "bad-type",
                    format!(
                        "`key_metrics` must be a list of metric names, found {}",
                        node.describe()
                    ),
                )
                .at(sources.location(node.span))
                .with_hint(hint),
            );
            return Vec::new();
        }
    };
    let mut names = Vec::new();
    for item in items {
        match item.as_str().filter(|name| !name.is_empty()) {
            Some(name) => names.push(name.to_string()),
            None => diagnostics.push(
                Diagnostic::new(
                    "bad-type",
                    format!(
                        "each entry of `key_metrics` must be a metric name, found {}",
                        item.describe()
                    ),
                )
                .at(sources.location(item.span))
                .with_hint(hint),
            ),
        }
    }
    names
}

/// `directions: { evaluate.accuracy: higher, train.peak_rss_mb: lower }`.
fn metric_directions(
    node: &Node,
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) -> BTreeMap<String, Direction> {
    let hint = "write e.g. `directions: { score.wer: lower, score.bleu: higher }`, a metric as `STAGE.METRIC` or `METRIC`";
    let mut directions = BTreeMap::new();
    let Some(entries) = node.as_map() else {
        diagnostics.push(
            Diagnostic::new(
                "bad-type",
                format!("`directions` must be a mapping, found {}", node.describe()),
            )
            .at(sources.location(node.span))
            .with_hint(hint),
        );
        return directions;
    };
    for entry in entries {
        match entry.value.as_str().and_then(Direction::parse_declared) {
            Some(direction) => {
                directions.insert(entry.key.clone(), direction);
            }
            None => diagnostics.push(
                Diagnostic::new(
                    "bad-direction",
                    format!(
                        "the direction of metric `{}` must be `higher` or `lower`, found {}",
                        entry.key,
                        entry.value.describe()
                    ),
                )
                .at(sources.location(entry.value.span))
                .with_hint(hint),
            ),
        }
    }
    directions
}
