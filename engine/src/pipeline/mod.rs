//! A resolved pipeline: what `load` returns and everything downstream
//! (DAG, keys, scheduler, executor) reads. Nothing here refers back to the
//! file: every value is final, every path project-relative.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use pipe_cache::LinkMode;

pub use crate::project_files::yaml_text::{yaml_float, yaml_quoted};
pub use executor::{
    parse_memory_mb, parse_suffixed_duration, parse_time_limit_s, slurm_time, ExecutorKind,
    ExecutorSpec,
};
pub use matrix::StageMatrix;
pub use params_file::{paths_overlap, ParamEdit, ParamsFileEdits};
pub use remote::RemoteSpec;

mod executor;
pub(crate) mod matrix;
mod params_file;
mod remote;
mod secret_env;
use crate::project_files::ProjectPath;
use crate::Location;

/// A validated pipeline: every stage expanded, every `${...}` resolved,
/// every path project-relative and inside the project.
#[derive(Debug, Clone)]
pub struct Pipeline {
    pub name: String,
    /// The pipeline file as given (for messages).
    pub file: PathBuf,
    /// The project root, absolute: the nearest directory at or above the
    /// pipeline file's that holds `.pipe/` or `.git`, else the file's own
    /// directory. Paths in the file are relative to it.
    pub root: PathBuf,
    /// Fully merged params: inline, then `params.yaml` beside the file,
    /// then `-S` overrides.
    pub params: serde_json::Value,
    /// Stages in declaration order, matrix stages expanded in place.
    pub stages: Vec<Stage>,
    /// `cache: { link: [...] }`, when the file sets it.
    pub link: Option<Vec<LinkMode>>,
    /// Where `link` is written.
    pub link_at: Option<crate::Location>,
    /// `cache: { remote: ... }`, when the file sets it.
    pub remote: Option<RemoteSpec>,
    /// `directions: { METRIC: higher | lower }`: which way metrics the
    /// built-in rules do not know improve, recorded with every run for
    /// `pipe diff` and `pipe compare`.
    pub directions: std::collections::BTreeMap<String, crate::metrics::Direction>,
    /// `executor:`, when the file sets it.
    pub executor: Option<ExecutorSpec>,
    /// The `-S` values a run writes into `params.yaml` for its commands,
    /// when an override changes a value the file sets.
    pub params_file: Option<ParamsFileEdits>,
    /// Where the `-S` values of params the pipeline file's own `params:`
    /// sets are written in that file: what `pipe apply` writes for good.
    /// A run never writes the pipeline file.
    pub pipeline_file_params: Option<ParamsFileEdits>,
    /// A sweep's combinations, when each runs in a work tree of its own
    /// (their commands read `params.yaml` by themselves, or write the same
    /// paths): what each tree's `params.yaml` holds. Empty otherwise.
    pub workspaces: Vec<Workspace>,
}

/// One combination's work tree in a sweep (`crate::exec::workspaces`
/// makes it under `.pipe/` for the run and removes it after).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// The combination's swept `-S` values, for messages.
    pub swept: Vec<String>,
    /// The combination's values in `params.yaml`, when it sets any.
    pub params_file: Option<ParamsFileEdits>,
}

#[derive(Debug, Clone)]
pub struct Stage {
    /// Unique: `train`, or for a matrix stage `train@precision=bf16-mixed,seed=1`
    /// (matrix keys in declared order).
    pub name: String,
    /// The name as written in the file (`train`).
    pub base_name: String,
    /// The matrix combination of this expansion (empty without a matrix).
    pub matrix: StageMatrix,
    pub kind: StageKind,
    pub desc: Option<String>,
    /// Declared and implicit dependencies, in declared order. A `${stages.X.outs.Y}`
    /// reference anywhere in the stage adds one (named by the reference text
    /// when it is not under `deps:`).
    pub deps: Vec<Dep>,
    pub outs: Vec<Out>,
    /// Metric files (JSON) the stage writes; cached and restored like outs.
    pub metrics: Vec<Out>,
    /// What `plots:` declares of the stage's files. Each file is one of
    /// `outs` or `metrics`, or lies inside an output directory: the loader
    /// adds to `outs` a plot file that is not already declared.
    pub plots: Vec<pipe_protocol::PlotSpec>,
    /// Variables set for the command, part of the key unless secret.
    pub env: BTreeMap<String, String>,
    /// Names in `env` whose value is a credential (`{ from_env: X, secret:
    /// true }`): passed to the stage, shown and keyed only as `***`.
    pub secret_env: BTreeSet<String>,
    /// Params this stage depends on (dotted path -> value): those its text
    /// interpolates plus those listed under `params:`.
    pub params_used: BTreeMap<String, serde_json::Value>,
    /// The paths under `params:`: params the command reads by itself (from
    /// `params.yaml`), not through `${params.X}`.
    pub params_listed: Vec<String>,
    pub resources: Resources,
    /// Rerun every time (DVC's `always_changed`).
    pub always_run: bool,
    /// Other stages train or evaluate on what it writes (`makes_data:
    /// true`, or its `StageInfo` roles): runs whose outputs of it differ
    /// are flagged when compared.
    pub makes_data: bool,
    /// Runs on the machine that runs `pipe` whatever the executor
    /// (`local: true`: a download on a login node with internet access).
    pub local: bool,
    /// Where the stage is declared, for runtime messages.
    pub location: Option<Location>,
    /// In a sweep whose combinations need work trees of their own
    /// (`Pipeline::workspaces`), the one this stage runs in; `None`: the
    /// project's. Not part of the key: the same stage makes the same
    /// result wherever it runs.
    pub workspace: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum StageKind {
    /// `run: "..."`: a shell command after interpolation, every
    /// interpolated value quoted as one shell word (docs/pipeline-spec.md);
    /// runs with `bash -c` in the project root.
    Command { command: String },
    /// `run: [program, arg, ...]`: run without a shell in the project root,
    /// each item one argument.
    Argv { argv: Vec<String> },
    /// `uses: name@version`: a stage that a worker (`pipe-stage`, or a
    /// third-party `pipe-stage-*`) offers in its catalog. Boxed: most
    /// stages are commands, and a million-stage sweep of them should not
    /// each carry a worker stage's worth of inline fields.
    Worker(Box<WorkerStage>),
}

/// A `uses:` stage as the catalog resolved it: what its key hashes and what
/// its worker receives are the same values.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerStage {
    pub uses: String,
    pub version: u32,
    /// The catalog's implementation version, part of the key.
    pub implementation: u32,
    /// The executable that runs it.
    pub worker: PathBuf,
    /// What starting it needs beyond its path, or why it cannot start.
    pub launch: crate::workers::Launch,
    /// `with:` after interpolation, checked against the catalog, defaults
    /// filled in, params the stage takes from the pipeline (`seed`) filled
    /// in, and `path` params project-relative.
    pub with: serde_json::Map<String, serde_json::Value>,
    /// The names in `with` whose kind is `path`: dependencies of the stage,
    /// handed to the worker as absolute paths.
    pub path_params: Vec<String>,
    /// Project-relative directory that holds the stage's outputs
    /// (`project::stage_output_dir`).
    pub output_dir: String,
    /// The stage reports on its run (`StageInfo::reads_run`): it runs after
    /// every other stage, every time, and is handed the run's record.
    pub reads_run: bool,
    /// What its params and metrics mean (`StageInfo::roles`).
    pub roles: pipe_protocol::record::StageRoles,
    /// The pages among its outputs that a person opens, as its worker's
    /// description declares them (`OutputSpec::page`), each checked to lie
    /// inside its output when the pipeline loaded.
    pub pages: Vec<ProjectPath>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dep {
    pub name: String,
    /// Made by the loader, checked and normalised once.
    pub path: ProjectPath,
    /// The stage output this path is (or is inside), when one produces it:
    /// the DAG edge.
    pub producer: Option<StageOutRef>,
    pub location: Option<Location>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StageOutRef {
    pub stage: String,
    pub out: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Out {
    pub name: String,
    /// Made by the loader, checked and normalised once.
    pub path: ProjectPath,
    pub location: Option<Location>,
    /// Declared `cache: false`: the user commits the file to git, so pipe
    /// leaves it out of `.gitignore` (it is still stored and restored
    /// with the rest of its stage's result).
    pub in_git: bool,
}

/// What a stage asks of the machine that runs it. Not part of its key:
/// where and with how much a stage runs does not change what it makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    pub cpus: u32,
    pub gpus: u32,
    /// Memory in MiB (`mem: 4G`); asked of Slurm, not enforced locally.
    pub mem_mb: Option<u64>,
    /// Wall-clock limit in seconds (`time: 2h`); asked of Slurm, not
    /// enforced locally.
    pub time_s: Option<u64>,
    /// Nodes (`nodes: 2`): above 1 only on Slurm, for a stage whose
    /// replicas span nodes (`num_nodes` of `train/classifier`).
    pub nodes: u32,
    /// Processes per node: the stage's replicas (its `devices` param) when
    /// it has several. Locally the worker starts them; on Slurm, srun does,
    /// one task each. Not written by the user.
    pub ranks_per_node: u32,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpus: 1,
            gpus: 0,
            mem_mb: None,
            time_s: None,
            nodes: 1,
            ranks_per_node: 1,
        }
    }
}

impl Stage {
    /// The project-relative pages among its outputs that a person opens
    /// (a report's `index.html`), as its stage's description declares them.
    pub fn pages(&self) -> Vec<ProjectPath> {
        let StageKind::Worker(worker) = &self.kind else {
            return Vec::new();
        };
        worker.pages.clone()
    }

    /// The `metrics.json` a built-in stage's worker may write beside its
    /// outputs: stored, restored and verified like them, when it is there.
    pub fn worker_metrics_path(&self) -> Option<ProjectPath> {
        match &self.kind {
            StageKind::Worker(worker) => Some(ProjectPath::of_pipe_layout(format!(
                "{}/{}",
                worker.output_dir,
                pipe_protocol::METRICS_FILE
            ))),
            _ => None,
        }
    }

    /// Every metrics file of the stage, in the order their values are
    /// merged: the worker's `metrics.json`, then the stage's `metrics:` files.
    pub fn metrics_paths(&self) -> Vec<ProjectPath> {
        self.worker_metrics_path()
            .into_iter()
            .chain(self.metrics.iter().map(|metric| metric.path.clone()))
            .collect()
    }

    /// The command as it runs, for people to read (after `> ` with `-v`
    /// and when it fails): interpolated, with every credential masked (in
    /// URLs by `redact_text`, a secret env value wherever it appears).
    /// `None` for a `uses:` stage, which runs no command of its own.
    pub fn shown_command(&self) -> Option<String> {
        let text = match &self.kind {
            StageKind::Command { command } => command.clone(),
            StageKind::Argv { argv } => argv
                .iter()
                .map(|word| shell_word(word))
                .collect::<Vec<_>>()
                .join(" "),
            StageKind::Worker(_) => return None,
        };
        let mut shown = pipe_protocol::redact::redact_text(&text).into_owned();
        for name in &self.secret_env {
            if let Some(value) = self.env.get(name).filter(|value| !value.is_empty()) {
                shown = shown.replace(value.as_str(), pipe_protocol::redact::MASK);
            }
        }
        Some(shown)
    }

    /// A line the stage printed, as pipe shows it: credentials in URLs,
    /// the values of its secret `env:` entries, and of pipe's own
    /// environment variables named as credentials (`AWS_SECRET_ACCESS_KEY`,
    /// `HF_TOKEN`...) masked, as CI systems mask secrets in logs.
    pub fn masked_output<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        let mut shown = pipe_protocol::redact::redact_text(text);
        let secrets = self
            .secret_env
            .iter()
            .filter_map(|name| self.env.get(name))
            .map(String::as_str)
            .chain(secret_env::process_secrets().iter().map(String::as_str));
        for value in secrets {
            if !value.is_empty() && shown.contains(value) {
                shown = std::borrow::Cow::Owned(shown.replace(value, pipe_protocol::redact::MASK));
            }
        }
        shown
    }

    /// Whether the stage reports on its run (`report/html`).
    pub fn reads_run(&self) -> bool {
        matches!(&self.kind, StageKind::Worker(worker) if worker.reads_run)
    }

    /// What the run record keeps of what this stage is.
    pub fn identity(&self) -> pipe_protocol::record::StageIdentity {
        use pipe_protocol::record::{RoleValues, StageIdentity, StageRoles};
        let (uses, roles, role_values): (_, StageRoles, _) = match &self.kind {
            StageKind::Worker(worker) => (
                Some(format!("{}@{}", worker.uses, worker.version)),
                worker.roles.clone(),
                RoleValues::of(&worker.roles, &worker.with),
            ),
            StageKind::Command { .. } | StageKind::Argv { .. } => {
                (None, Default::default(), Default::default())
            }
        };
        let mut roles = roles.with_conventional_metrics();
        roles.makes_data |= self.makes_data;
        StageIdentity {
            base_name: self.base_name.clone(),
            combination: self.matrix.combination(),
            uses,
            roles,
            role_values,
            // Set by the scheduler, which knows the stage's index.
            position: 0,
            plots: self.plots.clone(),
            pages: self.pages(),
        }
    }
}

impl WorkerStage {
    /// The params its worker receives: `with` as the key hashes it, with
    /// `path` params absolute (the key keeps them project-relative so that
    /// moving the project changes no key). Built from the resolved values,
    /// never guessed from their text.
    pub fn invocation_params(&self, root: &Path) -> serde_json::Map<String, serde_json::Value> {
        let mut params = self.with.clone();
        for name in &self.path_params {
            if let Some(serde_json::Value::String(path)) = params.get_mut(name) {
                *path = root.join(&*path).to_string_lossy().into_owned();
            }
        }
        params
    }
}

impl Pipeline {
    /// The outputs of command stages that pipe's cache holds for the user
    /// (all but those declared `cache: false`): what `.gitignore` lists.
    pub fn cached_command_outputs(&self) -> impl Iterator<Item = &Out> {
        self.stages
            .iter()
            .filter(|stage| {
                matches!(
                    stage.kind,
                    StageKind::Command { .. } | StageKind::Argv { .. }
                )
            })
            .flat_map(|stage| stage.outs.iter().chain(&stage.metrics))
            .filter(|out| !out.in_git)
    }

    pub fn stage(&self, name: &str) -> Option<&Stage> {
        self.stages.iter().find(|stage| stage.name == name)
    }

    /// Every place a restore may write: each output and metrics file, and
    /// each built-in stage's output directory, which is pipe's alone.
    pub fn restore_sites(&self) -> pipe_cache::RestoreSites<'_> {
        let mut sites = pipe_cache::RestoreSites::default();
        for stage in &self.stages {
            if let StageKind::Worker(worker) = &stage.kind {
                sites.owned_dir(&worker.output_dir);
            }
            for out in stage.outs.iter().chain(&stage.metrics) {
                sites.output(&out.path);
            }
        }
        sites
    }
}

/// `word` as a shell would need it to read it back as one word: as is when
/// it holds nothing the shell treats specially, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./=:,@%+".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}
