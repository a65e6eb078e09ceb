//! Staleness without running anything: for `pipe status`, `pipe why`,
//! `pipe run --dry-run` and gc. Keys are computed from what the workspace
//! holds now, as DVC does.

use std::collections::{BTreeMap, HashMap};

use pipe_cache::{ActionKey, ActionLookup, ActionResult, Artifact, Cache, StatCache};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::dag::Dag;
use crate::exec::select_stages;
use crate::key::{self, DepDigests, FieldChange};
use crate::pipeline::{Dep, Pipeline, Stage};
use crate::project::Project;
use crate::project_files::ProjectPath;
use crate::run_input;
use crate::running::{self, RunningStage};
use crate::runs::StageStatus;
use crate::runs::{RunDb, RunId};
use crate::workspace::{
    artifact_within, check_action_fits, hash_deps, hash_deps_planned, outputs_differing,
};
use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Freshness {
    /// Up to date: `pipe run` does nothing for it.
    Fresh,
    /// Its result is cached but the workspace differs: `pipe run` restores it.
    Restorable,
    /// `pipe run` executes it.
    Stale,
    /// A `pipe run` in progress is running it now.
    Running,
}

#[derive(Debug, Clone, Serialize)]
pub struct StageState {
    pub stage: String,
    pub freshness: Freshness,
    /// Human-readable reasons, most important first.
    pub reasons: Vec<String>,
    #[serde(skip)]
    pub key: Option<ActionKey>,
    /// Kept only for `why`.
    #[serde(skip)]
    pub manifest: Option<Value>,
}

pub struct Planner<'a> {
    pipeline: &'a Pipeline,
    cache: Cache,
    stat: StatCache,
    db: Option<RunDb>,
    /// The stages a live `pipe run` of this pipeline is running, by name.
    running: HashMap<String, RunningStage>,
}

impl<'a> Planner<'a> {
    pub fn new(pipeline: &'a Pipeline) -> Result<Planner<'a>> {
        let project = Project::open(&pipeline.root)?;
        let cache = Cache::open(&project.cache_dir)?;
        let stat = StatCache::open(&project.stat_db())?;
        let db = RunDb::open_existing(&project.runs_db())?;
        let running = running::running_stages(&project.state_dir, &pipeline.name);
        Ok(Planner {
            pipeline,
            cache,
            stat,
            db,
            running,
        })
    }

    /// States of the given stages (indices in topological order), without
    /// their manifests: a million-stage sweep must not hold a million
    /// manifests to print one line per stage.
    pub fn states(&self, dag: &Dag, order: &[usize]) -> Result<Vec<StageState>> {
        self.states_keeping_manifests(dag, order, false)
    }

    fn states_keeping_manifests(
        &self,
        dag: &Dag,
        order: &[usize],
        keep_manifests: bool,
    ) -> Result<Vec<StageState>> {
        match &self.db {
            // Each stage asks for its last run: one snapshot for them all.
            Some(db) => db.reading(|| self.walk(dag, order, keep_manifests)),
            None => self.walk(dag, order, keep_manifests),
        }
    }

    /// Each stage of `order` judged once those above it are.
    fn walk(&self, dag: &Dag, order: &[usize], keep_manifests: bool) -> Result<Vec<StageState>> {
        let stages = &self.pipeline.stages;
        let mut walk = Walk::new(&self.cache, dag, stages, order, keep_manifests);
        let mut states = Vec::with_capacity(order.len());
        for &index in order {
            let stage = &stages[index];
            if let Some(running) = self.running.get(&stage.name) {
                walk.freshness[index] = Some(Freshness::Running);
                states.push(running_state(stage, running));
                continue;
            }
            let mut state = self.stage_state(&mut walk, index)?;
            walk.freshness[index] = Some(state.freshness);
            // One reason is the rule; a pushed-to vector has room for four.
            state.reasons.shrink_to_fit();
            states.push(state);
        }
        tracing::info!(
            "{} files hashed; every other file was answered by the stat cache",
            self.stat.files_hashed()
        );
        if let Err(error) = self.stat.flush() {
            tracing::warn!("could not save the stat cache: {error}");
        }
        Ok(states)
    }

    /// A stage that is not running: stale when an input cannot be hashed,
    /// else judged by its key.
    fn stage_state(&self, walk: &mut Walk, index: usize) -> Result<StageState> {
        let stages = &self.pipeline.stages;
        let stage = &stages[index];
        let mut reasons = walk.upstream_reasons(stages, index);
        let planned = |dep: &Dep| {
            let producer = dep.producer.as_ref()?;
            let up = walk.dag.upstream[index]
                .iter()
                .find(|&&up| stages[up].name == producer.stage)?;
            artifact_within(&self.cache, walk.restored.get(up)?, &dep.path)
        };
        let deps = if walk.restored.is_empty() {
            hash_deps(&self.pipeline.root, stage, &self.cache, &self.stat)
        } else {
            hash_deps_planned(&self.pipeline.root, stage, &self.cache, &self.stat, planned)
        };
        match deps {
            Err(problem) => {
                let produced_by_stale_stage = !reasons.is_empty()
                    && stage
                        .deps
                        .iter()
                        .any(|dep| dep.name == problem.dep && dep.producer.is_some());
                // A missing output of a stale upstream stage is expected:
                // the upstream reason already says it.
                if !(problem.missing && produced_by_stale_stage) {
                    reasons.push(problem.message);
                }
                Ok(StageState {
                    stage: stage.name.clone(),
                    freshness: Freshness::Stale,
                    reasons,
                    key: None,
                    manifest: None,
                })
            }
            Ok(digests) => self.keyed_state(walk, index, &digests, reasons),
        }
    }

    /// A stage whose inputs are hashed: fresh or restorable when the cache
    /// holds the result of its key, stale with the reasons why not.
    fn keyed_state(
        &self,
        walk: &mut Walk,
        index: usize,
        digests: &DepDigests,
        mut reasons: Vec<String>,
    ) -> Result<StageState> {
        let stages = &self.pipeline.stages;
        let stage = &stages[index];
        let mut manifest = key::manifest(stage, digests, None);
        let waits_for = if stage.reads_run() {
            self.add_run_input(walk.dag, index, &walk.keyed_results, &mut manifest)
        } else {
            None
        };
        let key = key::key_of(&manifest);
        let mut freshness = Freshness::Stale;
        if let Some(upstream) = waits_for {
            if reasons.is_empty() {
                reasons.push(format!(
                    "it reports on the result of `{}`, which is not made yet",
                    stages[upstream].name
                ));
            }
        } else if stage.always_run {
            reasons.push("`always_run` is set".to_string());
        } else if let Some(result) = walk
            .actions
            .get(&key)
            .filter(|result| check_action_fits(stage, result).is_ok())
        {
            freshness = self.cached_state(walk, index, &result, &mut reasons)?;
        } else {
            reasons.extend(self.changes_since_last_run(&stage.name, &manifest)?);
        }
        Ok(StageState {
            stage: stage.name.clone(),
            freshness,
            reasons,
            // Without the results it reads, a reader's key is
            // not known yet.
            key: waits_for.is_none().then_some(key),
            manifest: walk.keep_manifests.then_some(manifest),
        })
    }

    /// A stage whose result the cache holds: fresh when the workspace
    /// holds it too and nothing above is stale, restorable when only the
    /// workspace differs.
    fn cached_state(
        &self,
        walk: &mut Walk,
        index: usize,
        result: &ActionResult,
        reasons: &mut Vec<String>,
    ) -> Result<Freshness> {
        let stage = &self.pipeline.stages[index];
        let differing = outputs_differing(&self.pipeline.root, result, &self.cache, &self.stat);
        if walk.readers && reasons.is_empty() {
            walk.keyed_results[index] = Some(run_input::keyed_stage(&run_input::Made {
                stage,
                outputs: &result.outputs,
                compute_ms: Some(result.duration_ms),
            }));
        }
        if differing.is_empty() {
            if reasons.is_empty() {
                return Ok(Freshness::Fresh);
            }
            // Only what is above is stale, and its result here is the one
            // its inputs make now: if they come out the same, it is kept
            // (early cutoff), so a status does not promise a rerun.
            reasons.push(UNLESS_SAME.to_string());
            return Ok(Freshness::Stale);
        }
        let mut freshness = Freshness::Stale;
        if reasons.is_empty() {
            freshness = Freshness::Restorable;
            walk.restored.insert(index, result.outputs.clone());
        }
        match self.run_that_made_workspace(stage, result)? {
            Some(made_by) => reasons.push(format!(
                "the workspace holds the result of {made_by}; \
                 the cache has this one"
            )),
            None => {
                for path in differing {
                    reasons.push(format!(
                        "output `{path}` is missing or modified; the cache has it"
                    ));
                }
            }
        }
        Ok(freshness)
    }

    /// Adds to a reader's `manifest` the results it reads (crate::run_input),
    /// or returns the first stage it depends on whose result is not known
    /// (it runs first, so the reader's key cannot be known yet).
    fn add_run_input(
        &self,
        dag: &Dag,
        reader: usize,
        keyed_results: &[Option<Value>],
        manifest: &mut Value,
    ) -> Option<usize> {
        let mut keyed = Map::new();
        for upstream in dag.closure(&[reader]) {
            if upstream == reader {
                continue;
            }
            match &keyed_results[upstream] {
                Some(value) => {
                    keyed.insert(self.pipeline.stages[upstream].name.clone(), value.clone());
                }
                None => return Some(upstream),
            }
        }
        key::add_field(
            manifest,
            run_input::MANIFEST_FIELD,
            run_input::keyed_run(self.pipeline, keyed),
        );
        None
    }

    /// When the workspace holds every output of `stage`, but not those of
    /// `result`: the recorded run whose result it holds (`run #4 with
    /// -S lr=0.1`), if one is.
    fn run_that_made_workspace(
        &self,
        stage: &Stage,
        result: &ActionResult,
    ) -> Result<Option<String>> {
        let mut held = BTreeMap::new();
        for path in result.outputs.keys() {
            match self
                .cache
                .hash_path(&self.pipeline.root.join(path), &self.stat)
            {
                Ok(artifact) => {
                    held.insert(path.to_string(), artifact.digest);
                }
                // Missing: the plain reason says so.
                Err(_) => return Ok(None),
            }
        }
        let Some(db) = &self.db else {
            return Ok(None);
        };
        Ok(db
            .run_that_made(&self.pipeline.name, &stage.name, &held)?
            .map(|(run, overrides)| describe_run(run, &overrides)))
    }

    /// One line per changed field group, or "never run".
    fn changes_since_last_run(&self, stage: &str, manifest: &Value) -> Result<Vec<String>> {
        let Some((_, _, last)) = self.last_manifest(stage)? else {
            return Ok(vec![match self.last_failure(stage)? {
                Some((run, StageStatus::Interrupted)) => {
                    format!("it never had a result; it was interrupted in run #{run}")
                }
                Some((run, _)) => format!("it never had a result; it failed in run #{run}"),
                None => "never run with this key; no earlier run recorded".to_string(),
            }]);
        };
        let changes = key::diff_manifests(&last, manifest);
        if changes.is_empty() {
            return Ok(vec!["its last result is no longer in the cache".to_string()]);
        }
        let mut seen = std::collections::HashSet::new();
        let mut groups: Vec<String> = Vec::new();
        let mut results: Vec<String> = Vec::new();
        for change in &changes {
            let group = describe_group(change);
            // An empty `params: {}` against params now used (or back) is
            // the same change as the param's own line.
            if group.is_empty() || !seen.insert(group.clone()) {
                continue;
            }
            match result_changed(change) {
                Some(stage) => results.push(stage.to_string()),
                None => groups.push(group),
            }
        }
        // A report reads every stage of a large run: their names, counted.
        const NAMED: usize = 3;
        match results.len() {
            0 => {}
            1..=NAMED => groups.extend(
                results
                    .iter()
                    .map(|stage| format!("the result of `{stage}` changed")),
            ),
            count => groups.push(format!(
                "the results of {count} stages changed (`{}` and {} more)",
                results[..NAMED].join("`, `"),
                count - NAMED
            )),
        }
        Ok(groups)
    }

    /// The key and manifest `stage` had in the last run in which it had
    /// a result.
    pub fn last_manifest(
        &self,
        stage: &str,
    ) -> Result<Option<(RunId, pipe_cache::ActionKey, Value)>> {
        match &self.db {
            Some(db) => db.last_manifest(&self.pipeline.name, stage),
            None => Ok(None),
        }
    }

    /// The last run in which `stage` failed.
    pub fn last_failure(&self, stage: &str) -> Result<Option<(RunId, StageStatus)>> {
        match &self.db {
            Some(db) => db.last_failure(&self.pipeline.name, stage),
            None => Ok(None),
        }
    }
}

/// What a walk over the stages carries from one stage to the next.
struct Walk<'w> {
    dag: &'w Dag,
    keep_manifests: bool,
    /// Per stage, once judged.
    freshness: Vec<Option<Freshness>>,
    actions: ActionLookup<'w>,
    /// Whether a selected stage reads the run.
    readers: bool,
    /// What a stage reading the run is keyed on, for each stage whose
    /// result is known: kept only when such a stage is selected.
    keyed_results: Vec<Option<Value>>,
    /// The outputs a run restores, for each restorable stage: what the
    /// stages below it will read, which the workspace does not hold yet.
    restored: HashMap<usize, BTreeMap<ProjectPath, Artifact>>,
}

impl<'w> Walk<'w> {
    fn new(
        cache: &'w Cache,
        dag: &'w Dag,
        stages: &[Stage],
        order: &[usize],
        keep_manifests: bool,
    ) -> Self {
        let readers = order.iter().any(|&index| stages[index].reads_run());
        Walk {
            dag,
            keep_manifests,
            freshness: vec![None; stages.len()],
            actions: ActionLookup::new(cache),
            readers,
            keyed_results: if readers {
                vec![None; stages.len()]
            } else {
                Vec::new()
            },
            restored: HashMap::new(),
        }
    }

    /// A stage above `index` that is stale or running makes it stale.
    /// Many stages of one matrix above are one reason (`11 upstream
    /// stages of `clean` are stale`), so an aggregation's line stays one.
    fn upstream_reasons(&self, stages: &[Stage], index: usize) -> Vec<String> {
        let mut groups: Vec<(&str, &str, Vec<&str>)> = Vec::new();
        for &up in &self.dag.upstream[index] {
            let state = match self.freshness[up] {
                Some(Freshness::Stale) => "stale",
                Some(Freshness::Running) => "running",
                _ => continue,
            };
            let name = stages[up].name.as_str();
            let base = name.split('@').next().unwrap_or(name);
            match groups
                .iter_mut()
                .find(|(seen, seen_state, _)| *seen == base && *seen_state == state)
            {
                Some((_, _, names)) => names.push(name),
                None => groups.push((base, state, vec![name])),
            }
        }
        groups
            .into_iter()
            .map(|(base, state, names)| match names.as_slice() {
                [one] => format!("upstream stage `{one}` is {state}"),
                many => format!("{} upstream stages of `{base}` are {state}", many.len()),
            })
            .collect()
    }
}

/// Said of a stage stale only because of what is above it.
const UNLESS_SAME: &str = "stale unless its inputs come out the same";

/// A stage that a live `pipe run` is running now.
fn running_state(stage: &Stage, running: &RunningStage) -> StageState {
    StageState {
        stage: stage.name.clone(),
        freshness: Freshness::Running,
        reasons: vec![format!(
            "running in run #{} (pid {})",
            running.run, running.pid
        )],
        key: None,
        manifest: None,
    }
}

/// `run #4`, with the `-S` overrides its command line gave
/// (`run #4 with -S lr=0.1`): what made it differ from a plain run.
fn describe_run(run: RunId, overrides: &[crate::overrides::ParamOverride]) -> String {
    if overrides.is_empty() {
        format!("run #{run}")
    } else {
        let shown: Vec<String> = overrides
            .iter()
            .map(|setting| format!("-S {setting}"))
            .collect();
        format!("run #{run} with {}", shown.join(" "))
    }
}

/// The stage whose result a report read changed, when `change` is one.
fn result_changed(change: &FieldChange) -> Option<&str> {
    match (change.path.first()?.as_str(), change.path.get(1)?.as_str()) {
        ("run", "stages") => change.path.get(2).map(String::as_str),
        _ => None,
    }
}

/// `deps` / `data/train.csv` / `digest` -> "dependency `data/train.csv`
/// changed", etc.: names as the user wrote them, dots and all.
fn describe_group(change: &FieldChange) -> String {
    let head = change.path.first().map_or("", String::as_str);
    let name = change.path.get(1).map_or("", String::as_str);
    match head {
        "command" | "argv" => "command changed".to_string(),
        "uses" | "with" | "implementation" => "stage definition changed".to_string(),
        "params" if change.path.len() == 1 => params_now(change),
        "params" => match (&change.before, &change.after) {
            (None, Some(_)) => format!("param `{}` now used", change.path[1..].join(".")),
            (Some(_), None) => format!("param `{}` no longer used", change.path[1..].join(".")),
            _ => format!("param `{}` changed", change.path[1..].join(".")),
        },
        // `deps: {}` against deps now declared (or back): each has its own.
        "deps" if change.path.len() == 1 => String::new(),
        "deps" => match (&change.before, &change.after) {
            (None, Some(_)) => format!("dependency `{name}` added"),
            (Some(_), None) => format!("dependency `{name}` removed"),
            _ => format!("dependency `{name}` changed"),
        },
        "outs" | "metrics" => "declared outputs changed".to_string(),
        "env" => format!("env `{name}` changed"),
        // What a report reads (crate::run_input).
        "run" => match (name, change.path.get(2)) {
            ("stages", Some(stage)) => format!("the result of `{stage}` changed"),
            ("params", _) => format!("param `{}` changed", change.path[2..].join(".")),
            _ => format!("`{}` changed", change.field),
        },
        _ => format!("`{}` changed", change.field),
    }
}

/// A stage's whole set of params changed from none to some or back: which
/// it now uses, or no longer does (never an empty name).
fn params_now(change: &FieldChange) -> String {
    let names = |value: &Option<Value>| -> Vec<String> {
        value
            .as_ref()
            .map(|value| {
                crate::key::flatten(value)
                    .into_keys()
                    .filter(|name| !name.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    };
    let (before, after) = (names(&change.before), names(&change.after));
    let quoted = |names: &[String]| {
        names
            .iter()
            .map(|name| format!("`{name}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (before.is_empty(), after.is_empty()) {
        (true, false) => format!("now uses param{} {}", plural(after.len()), quoted(&after)),
        (false, true) => format!(
            "no longer uses param{} {}",
            plural(before.len()),
            quoted(&before)
        ),
        // `{}` against nothing: the params themselves have lines of
        // their own.
        (true, true) => String::new(),
        _ => "params changed".to_string(),
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 {
        ""
    } else {
        "s"
    }
}

/// What `pipe run --dry-run` shows: the state of each stage a run would
/// visit, in the order it would.
#[derive(Debug)]
pub struct DryRun {
    /// The pipeline's index of each state's stage, for what only the
    /// stage knows (the command it would run).
    pub stages: Vec<usize>,
    pub states: Vec<StageState>,
}

/// `pipe run --dry-run [TARGETS]`: what a run of `targets` (every stage
/// when none is given) and what they need would do, without running.
pub fn dry_run(
    pipeline: &Pipeline,
    dag: &Dag,
    targets: &[String],
    forced: &Forced<'_>,
) -> Result<DryRun> {
    let selected = select_stages(pipeline, targets)?;
    // A name `--force` does not know is refused here as the run refuses it.
    let forced_stages = select_stages(pipeline, forced.stages)?;
    let stages = if selected.is_empty() {
        dag.order.clone()
    } else {
        dag.closure(&selected)
    };
    let mut states = Planner::new(pipeline)?.states(dag, &stages)?;
    let mut stale = vec![false; pipeline.stages.len()];
    for (state, &index) in states.iter_mut().zip(&stages) {
        if forced.all || forced_stages.contains(&index) {
            if state.freshness != Freshness::Stale {
                state.freshness = Freshness::Stale;
            }
            let reason = if forced.all { "--force-all" } else { "--force" };
            state.reasons.insert(0, format!("forced ({reason})"));
        } else if state.freshness != Freshness::Stale {
            // Below a forced stage: it reruns if what the forced one makes
            // comes out otherwise; `stages` is in the order a run visits.
            if let Some(&up) = dag.upstream[index].iter().find(|&&up| stale[up]) {
                state.freshness = Freshness::Stale;
                state.reasons.push(format!(
                    "upstream stage `{}` reruns; {UNLESS_SAME}",
                    pipeline.stages[up].name
                ));
            }
        }
        stale[index] = state.freshness == Freshness::Stale;
    }
    Ok(DryRun { stages, states })
}

/// `--force STAGE…` and `--force-all`: stages a run runs even when fresh.
#[derive(Debug, Clone, Copy, Default)]
pub struct Forced<'a> {
    pub stages: &'a [String],
    pub all: bool,
}

/// `pipe why STAGE`: a [`Why`] for each stage the name selects (every
/// variant of a matrix stage's base name).
pub fn why_stages(pipeline: &Pipeline, dag: &Dag, stage: &str) -> Result<Vec<Why>> {
    let indices = select_stages(pipeline, &[stage.to_string()])?;
    let planner = Planner::new(pipeline)?;
    indices
        .into_iter()
        .map(|index| why(&planner, dag, index))
        .collect()
}

/// What `pipe why` prints: the current state plus every changed field.
#[derive(Debug, Clone, Serialize)]
pub struct Why {
    pub state: StageState,
    pub key: Option<pipe_cache::ActionKey>,
    /// The last run in which the stage had a result, and its key then.
    pub previous_run: Option<RunId>,
    pub previous_key: Option<pipe_cache::ActionKey>,
    pub changes: Vec<FieldChange>,
    /// A later run in which the stage failed, or was interrupted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_run: Option<RunId>,
    /// It was interrupted in `failed_run`, rather than failed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

pub fn why(planner: &Planner<'_>, dag: &Dag, stage_index: usize) -> Result<Why> {
    let order = dag.closure(&[stage_index]);
    let states = planner.states_keeping_manifests(dag, &order, true)?;
    let state = states
        .into_iter()
        .last()
        .ok_or_else(|| crate::EngineError::Internal("empty closure".into()))?;
    let stage_name = &planner.pipeline.stages[stage_index].name;
    let previous = planner.last_manifest(stage_name)?;
    let (previous_run, previous_key, changes) = match (&previous, &state.manifest) {
        (Some((run, key, last)), Some(current)) => {
            (Some(*run), Some(*key), key::diff_manifests(last, current))
        }
        (Some((run, key, _)), None) => (Some(*run), Some(*key), Vec::new()),
        _ => (None, None, Vec::new()),
    };
    let failure = planner
        .last_failure(stage_name)?
        .filter(|(failed, _)| previous_run.is_none_or(|previous| *failed > previous));
    Ok(Why {
        key: state.key,
        state,
        previous_run,
        previous_key,
        changes,
        failed_run: failure.map(|(run, _)| run),
        interrupted: failure.is_some_and(|(_, status)| status == StageStatus::Interrupted),
    })
}
