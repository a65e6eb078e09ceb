//! The stored run record and how one row of runs.db becomes one: columns
//! read by name, every value checked.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

use pipe_cache::{ActionKey, Artifact};
use pipe_protocol::record::{
    Combination, RoleValues, RunStatus, StageIdentity, StageRoles, StageStatus,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::metrics::Direction;
use crate::overrides::{ParamOverride, ParamPath};
use crate::project_files::ProjectPath;
use crate::run_id::RunId;
use crate::{EngineError, Result};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageRecord {
    pub stage: String,
    /// What the stage is: recorded with it, never parsed back out of its
    /// name.
    #[serde(flatten)]
    pub identity: StageIdentity,
    pub key: Option<ActionKey>,
    pub status: StageStatus,
    pub duration_ms: u64,
    /// Read back (runs.db, a pulled record), a path the stored rule
    /// refuses refuses the whole record (`ProjectPath`'s `Deserialize`):
    /// these are what checkout restores.
    pub outputs: BTreeMap<ProjectPath, Artifact>,
    pub metrics: BTreeMap<String, Value>,
    /// Failure message, or why it ran; credentials already masked where
    /// it is made (`exec::failed_record`), so it is shown and stored as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The Slurm job that ran it (`123`, `123_4` for a task of an array).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The node its job ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl StageRecord {
    /// A record of `stage` with nothing in it yet but its status.
    pub fn new(stage: &str, identity: StageIdentity, status: StageStatus) -> StageRecord {
        StageRecord {
            stage: stage.to_string(),
            identity,
            key: None,
            status,
            duration_ms: 0,
            outputs: BTreeMap::new(),
            metrics: BTreeMap::new(),
            detail: None,
            job: None,
            node: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// This database's id; another project's record carries its own.
    #[serde(default)]
    pub id: RunId,
    /// Unique across machines: how a record pulled from a remote cache is
    /// recognised when it comes again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Where a pulled record came from (the remote's URL); `None` for a
    /// run of this project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    pub pipeline: String,
    /// The pipeline file, relative to the project root, as the run found
    /// it; `None` for runs recorded before pipe kept it. Only a hint in a
    /// pulled record: `pipe checkout` reads the file here and holds the
    /// record to the stages it declares. One the stored rule refuses is
    /// read as none, the rest of the record kept.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "plain_file_only"
    )]
    pub file: Option<ProjectPath>,
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
    pub status: RunStatus,
    pub git_commit: Option<String>,
    pub git_dirty: Option<bool>,
    pub argv: Vec<String>,
    /// The `-S` settings the run was loaded with, in order (credentials
    /// masked): kept as data in runs.db, never re-read from argv. In a
    /// record's JSON (`pipe show --json`, a remote's records) they are the
    /// arguments they read as (`x=2`), which every pipe reads back as the
    /// same settings, this one through `ParamOverride`'s stored form.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "as_arguments"
    )]
    pub overrides: Vec<ParamOverride>,
    /// The run is a sweep (`pipe run -m`) as one matrix run: `overrides`
    /// list several values, and load again only as a sweep.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sweep: bool,
    pub params: Value,
    /// What the pipeline declared under `directions:`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub directions: BTreeMap<String, Direction>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageRecord>,
    /// The name given with `pipe run --name` or `pipe runs name`: a
    /// selector, as the number and the uid are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Tags given with `pipe tag`, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// When the name or tags last changed: of two copies of a run's
    /// labels (here and in a remote), the later one counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels_ms: Option<u64>,
    /// Of a pulled run: the fields its results do not bear out, shown as
    /// the record's word only (`git_commit`, `params.PATH`); set on
    /// import, never taken from a record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unverified: Vec<String>,
    /// The branch it ran on: HEAD's, or the one the CI builds
    /// (`runs::ci_ref`); `None` on a detached HEAD outside CI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// When a CI job ran a merge of a branch into its base (a pull
    /// request's merge commit, `git_commit`): the branch's own head, the
    /// commit people know; refs to it select the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_commit: Option<String>,
}

/// The prefix of a pulled run's `unverified` entry for a stage whose result
/// was superseded by another run's for the same key.
pub(crate) const SUPERSEDED: &str = "superseded.";

/// The prefix of a pulled run's `unverified` entry for a stage whose result
/// neither the remote nor the local cache held when it was pulled.
pub(crate) const NOT_IN_REMOTE: &str = "not_in_remote.";

impl RunRecord {
    /// The directions a comparison may take from this run: a pulled run's
    /// say which metrics are key, never which way is better, since a
    /// record flipping a loss to `higher` would turn worse into better.
    pub fn trusted_directions(&self) -> std::borrow::Cow<'_, BTreeMap<String, Direction>> {
        if self.origin.is_none() {
            return std::borrow::Cow::Borrowed(&self.directions);
        }
        std::borrow::Cow::Owned(
            self.directions
                .keys()
                .map(|name| (name.clone(), Direction::Unknown))
                .collect(),
        )
    }

    /// `its commit; params train.lr, train.seed`: what of a pulled run is
    /// shown as its record's word only; `None` when everything shown is
    /// borne out (the stages it cannot show: [`Self::withheld_summary`]).
    pub fn unverified_summary(&self) -> Option<String> {
        if self.unverified.is_empty() {
            return None;
        }
        let mut parts = Vec::new();
        if self.unverified.iter().any(|field| field == "git_commit") {
            parts.push("its commit".to_string());
        }
        let params: Vec<&str> = self
            .unverified
            .iter()
            .filter_map(|field| field.strip_prefix("params."))
            .collect();
        match params.len() {
            0 => {}
            1..=4 => parts.push(format!("params {}", params.join(", "))),
            n => parts.push(format!(
                "params {} and {} more",
                params[..3].join(", "),
                n - 3
            )),
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// `` `train` (another run's result for the same key was stored
    /// first) ``: the stages of a pulled run whose outputs and metrics are
    /// not shown, and why; `None` when every stage's are.
    pub fn withheld_summary(&self) -> Option<String> {
        let parts: Vec<String> = self
            .unverified
            .iter()
            .filter_map(|field| {
                let why = [
                    (
                        SUPERSEDED,
                        "another run's result for the same key was stored first",
                    ),
                    (NOT_IN_REMOTE, "its result is not in the remote"),
                ];
                why.into_iter().find_map(|(prefix, why)| {
                    Some(format!("`{}` ({why})", field.strip_prefix(prefix)?))
                })
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// The uid as selectors take it: its first 8 digits, which stay
    /// unambiguous among a history of tens of thousands of runs.
    pub fn short_uid(&self) -> Option<&str> {
        self.uid.as_deref().map(|uid| &uid[..uid.len().min(8)])
    }

    /// The params the command line set: what the user changed on
    /// purpose, read from [`RunRecord::overrides`].
    pub fn overridden_params(&self) -> impl Iterator<Item = &ParamPath> {
        self.overrides.iter().map(|setting| &setting.path)
    }

    /// A sweep record's settings as the sweep's, whichever pipe wrote
    /// them (`ParamOverride::in_sweep_record`).
    pub(crate) fn settle_sweep(&mut self) -> std::result::Result<(), crate::UsageError> {
        if self.sweep {
            self.overrides = std::mem::take(&mut self.overrides)
                .into_iter()
                .map(ParamOverride::in_sweep_record)
                .collect::<std::result::Result<_, _>>()?;
        }
        Ok(())
    }
}

/// A record's pipeline file, dropped when the stored rule refuses it.
fn plain_file_only<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<ProjectPath>, D::Error> {
    let file = Option::<String>::deserialize(deserializer)?;
    Ok(file.and_then(|file| ProjectPath::try_from(file).ok()))
}

/// Settings as the `-S` arguments they read as.
fn as_arguments<S: serde::Serializer>(
    settings: &[ParamOverride],
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    serializer.collect_seq(settings.iter().map(ToString::to_string))
}

/// The `-S` settings of a command line, in order: how records written
/// before the settings were kept as data get theirs (migration, and a
/// pulled record that lacks them). `--` ends them; one that does not
/// parse was refused by the run that wrote it, and is left out.
pub(crate) fn overrides_in_argv(argv: &[String]) -> Vec<ParamOverride> {
    let sweep = argv
        .iter()
        .take_while(|arg| *arg != "--")
        .any(|arg| arg == "-m" || arg == "--multirun");
    overrides_written_in_argv(argv)
        .into_iter()
        .filter_map(|setting| match sweep {
            true => ParamOverride::parse_swept(&setting).ok(),
            false => ParamOverride::parse(&setting).ok(),
        })
        .collect()
}

fn overrides_written_in_argv(argv: &[String]) -> Vec<String> {
    let mut settings = Vec::new();
    let mut args = argv.iter().skip(1);
    while let Some(arg) = args.next() {
        let setting = match arg.as_str() {
            "-S" | "--set" => args.next().map(String::as_str),
            "--" => break,
            other => other
                .strip_prefix("--set=")
                .or_else(|| other.strip_prefix("-S").filter(|rest| !rest.is_empty())),
        };
        if let Some(setting) = setting.filter(|setting| setting.contains('=')) {
            settings.push(setting.to_string());
        }
    }
    settings
}

/// A run as it travels to and from a remote cache: its record, stages
/// included, and the key manifests of those stages (for `pipe diff`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunExport {
    pub format: String,
    pub run: RunRecord,
    pub manifests: BTreeMap<String, Value>,
}

impl RunExport {
    pub const FORMAT: &'static str = "pipe-run-v1";
}

pub struct RunStart<'a> {
    pub pipeline: &'a str,
    /// The pipeline file, relative to the project root.
    pub file: Option<&'a str>,
    pub argv: &'a [String],
    /// The `-S` settings.
    pub overrides: &'a [ParamOverride],
    /// `overrides` are a sweep's, loaded as one run (`sweep::load_recorded`).
    pub sweep: bool,
    pub params: &'a Value,
    pub directions: &'a BTreeMap<String, Direction>,
    /// The commit HEAD names; the dirty flag comes with the run's end
    /// ([`super::RunEnd`]), since working it out takes longer.
    pub git_commit: Option<&'a str>,
    /// `pipe run --name`.
    pub name: Option<&'a str>,
    pub branch: Option<&'a str>,
    pub head_commit: Option<&'a str>,
    /// When the run started: its row is written later, when it first does
    /// something.
    pub started_ms: u64,
}

/// How a recorded run ended.
pub struct RunEnd {
    pub status: RunStatus,
    /// Whether tracked files differed from the commit when the run
    /// started; `None` outside git, when it could not be worked out, or
    /// when a settler writes it later.
    pub git_dirty: Option<bool>,
}

/// Reads the columns of one row by name. A value that is missing where
/// required, of the wrong type, or does not parse is
/// [`EngineError::CorruptRecord`], naming the run, the stage and the
/// column.
pub(super) struct Columns<'r, 's> {
    pub row: &'r rusqlite::Row<'s>,
    pub path: &'r Path,
    pub run: RunId,
    pub stage: Option<String>,
    /// What the query put before the table's column names (`s_` where the
    /// run's columns are selected too); an error names the table's column.
    pub prefix: &'static str,
}

impl Columns<'_, '_> {
    pub fn corrupt(&self, column: &str, problem: impl std::fmt::Display) -> EngineError {
        let column = column.strip_prefix(self.prefix).unwrap_or(column);
        let place = match &self.stage {
            Some(stage) => format!("run #{}, stage `{stage}`", self.run),
            None => format!("run #{}", self.run),
        };
        EngineError::CorruptRecord {
            path: self.path.to_path_buf(),
            place,
            column: column.to_string(),
            problem: problem.to_string(),
        }
    }

    pub fn get<T: rusqlite::types::FromSql>(&self, column: &str) -> Result<T> {
        self.row
            .get::<_, T>(column)
            .map_err(|error| self.corrupt(column, error))
    }

    /// A JSON column that must be present.
    pub fn json<T: DeserializeOwned>(&self, column: &str) -> Result<T> {
        let text: String = self.get(column)?;
        serde_json::from_str(&text).map_err(|error| self.corrupt(column, error))
    }

    /// A JSON column that may be NULL (a column added after the row was
    /// written); present, it must parse.
    pub fn opt_json<T: DeserializeOwned>(&self, column: &str) -> Result<Option<T>> {
        match self.get::<Option<String>>(column)? {
            None => Ok(None),
            Some(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|error| self.corrupt(column, error)),
        }
    }

    pub fn parsed<T>(&self, column: &str) -> Result<T>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        let text: String = self.get(column)?;
        text.parse().map_err(|error| self.corrupt(column, error))
    }

    pub fn opt_parsed<T>(&self, column: &str) -> Result<Option<T>>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        match self.get::<Option<String>>(column)? {
            None => Ok(None),
            Some(text) => text
                .parse()
                .map(Some)
                .map_err(|error| self.corrupt(column, error)),
        }
    }

    /// The `overrides` column: settings as data, or as the arguments a
    /// pipe that did not keep them as data wrote (`["x=2"]`); a sweep's
    /// read as the sweep's.
    pub fn overrides(&self, sweep: bool) -> Result<Vec<ParamOverride>> {
        let settings: Vec<ParamOverride> = self.json("overrides")?;
        match sweep {
            false => Ok(settings),
            true => settings
                .into_iter()
                .map(ParamOverride::in_sweep_record)
                .collect::<std::result::Result<_, _>>()
                .map_err(|error| self.corrupt("overrides", error)),
        }
    }

    /// A count or time stored as an integer: never negative.
    pub fn unsigned(&self, column: &str) -> Result<u64> {
        let value: i64 = self.get(column)?;
        u64::try_from(value).map_err(|_| self.corrupt(column, format!("{value} is negative")))
    }

    pub fn opt_unsigned(&self, column: &str) -> Result<Option<u64>> {
        match self.get::<Option<i64>>(column)? {
            None => Ok(None),
            Some(value) => u64::try_from(value)
                .map(Some)
                .map_err(|_| self.corrupt(column, format!("{value} is negative"))),
        }
    }
}

/// The run of a row holding the `runs` columns under their own names.
pub(super) fn run_from_row(row: &rusqlite::Row<'_>, path: &Path) -> Result<RunRecord> {
    let id: RunId = row.get("id").map_err(|e| EngineError::database(path, e))?;
    let columns = Columns {
        row,
        path,
        run: id,
        stage: None,
        prefix: "",
    };
    let mut status: RunStatus = columns.parsed("status")?;
    let pid: i64 = columns.get("pid")?;
    let sweep = columns.get::<Option<bool>>("sweep")?.unwrap_or(false);
    if status == RunStatus::Running && !process_alive(pid) {
        status = RunStatus::Interrupted;
    }
    Ok(RunRecord {
        id,
        uid: columns.get("uid")?,
        origin: columns.get("origin")?,
        pipeline: columns.get("pipeline")?,
        file: columns
            .get::<Option<String>>("file")?
            .and_then(|file| ProjectPath::try_from(file).ok()),
        started_ms: columns.unsigned("started_ms")?,
        ended_ms: columns.opt_unsigned("ended_ms")?,
        status,
        git_commit: columns.get("git_commit")?,
        git_dirty: columns.get("git_dirty")?,
        argv: columns.json("argv")?,
        overrides: columns.overrides(sweep)?,
        sweep,
        params: columns.json("params")?,
        directions: columns.opt_json("directions")?.unwrap_or_default(),
        stages: Vec::new(),
        name: columns.get("name")?,
        tags: columns.opt_json("tags")?.unwrap_or_default(),
        labels_ms: columns.opt_unsigned("labels_ms")?,
        unverified: columns.opt_json("unverified")?.unwrap_or_default(),
        branch: columns.get("branch")?,
        head_commit: columns.get("head_commit")?,
    })
}

/// The stage of a row holding the `stage_runs` columns, each named with
/// `columns.prefix` in front (`s_` where a query also has the run's
/// columns).
pub(super) fn stage_from_row(columns: &Columns<'_, '_>) -> Result<StageRecord> {
    let name = |column: &str| format!("{}{column}", columns.prefix);
    Ok(StageRecord {
        stage: columns.get(&name("stage"))?,
        identity: identity_from_row(columns)?,
        key: columns.opt_parsed(&name("key"))?,
        status: columns.parsed(&name("status"))?,
        duration_ms: columns.unsigned(&name("duration_ms"))?,
        outputs: columns.json(&name("outputs"))?,
        metrics: columns.json(&name("metrics"))?,
        detail: columns.get(&name("detail"))?,
        job: columns.get(&name("job"))?,
        node: columns.get(&name("node"))?,
    })
}

fn identity_from_row(columns: &Columns<'_, '_>) -> Result<StageIdentity> {
    let name = |column: &str| format!("{}{column}", columns.prefix);
    Ok(StageIdentity {
        base_name: columns.get(&name("base_name"))?,
        combination: columns.json::<Combination>(&name("combination"))?,
        uses: columns.get(&name("uses"))?,
        roles: columns.json::<StageRoles>(&name("roles"))?,
        role_values: columns.json::<RoleValues>(&name("role_values"))?,
        // Version 0 kept no position: its rows keep the order they were
        // saved in.
        position: columns
            .opt_unsigned(&name("position"))?
            .map_or(0, |position| position as usize),
        // NULL: no plots, or a run recorded before they were kept.
        plots: columns.opt_json(&name("plots"))?.unwrap_or_default(),
        // NULL: no pages, or a run recorded before they were kept (its
        // built-in stages' pages are then read from the catalog).
        pages: columns.opt_json(&name("pages"))?.unwrap_or_default(),
    })
}

/// The `stage_runs` columns under the names [`stage_from_row`] reads, for
/// a query that joins them as `alias`.
pub(super) fn stage_columns(alias: &str, prefix: &str) -> String {
    STAGE_COLUMNS
        .iter()
        .map(|column| format!("{alias}.{column} AS {prefix}{column}"))
        .collect::<Vec<_>>()
        .join(", ")
}

const STAGE_COLUMNS: &[&str] = &[
    "stage",
    "base_name",
    "combination",
    "uses",
    "roles",
    "role_values",
    "position",
    "plots",
    "pages",
    "key",
    "status",
    "duration_ms",
    "outputs",
    "metrics",
    "detail",
    "job",
    "node",
];

/// The `runs` columns [`run_from_row`] reads, for a query that selects
/// them from `alias`.
pub(super) fn run_columns(alias: &str) -> String {
    RUN_COLUMNS
        .iter()
        .map(|column| format!("{alias}.{column} AS {column}"))
        .collect::<Vec<_>>()
        .join(", ")
}

const RUN_COLUMNS: &[&str] = &[
    "id",
    "pipeline",
    "started_ms",
    "ended_ms",
    "status",
    "git_commit",
    "git_dirty",
    "argv",
    "params",
    "pid",
    "directions",
    "uid",
    "origin",
    "file",
    "overrides",
    "sweep",
    "name",
    "tags",
    "labels_ms",
    "unverified",
    "branch",
    "head_commit",
];

fn process_alive(pid: i64) -> bool {
    if pid <= 0 || pid > i32::MAX as i64 {
        return false;
    }
    if pid as u32 == std::process::id() {
        return true;
    }
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_params_set_on_the_command_line_are_read_back_from_argv() {
        let argv = [
            "pipe",
            "run",
            "-S",
            "train.precision=bf16-mixed",
            "--set",
            "seed=2",
            "--set=lr=0.1",
            "-Sbatch=8",
            "-S",
            "+extra.key=1",
            "--json",
            "--",
            "-S",
            "after=1",
        ];
        let argv: Vec<String> = argv.iter().map(|arg| arg.to_string()).collect();
        let record = RunRecord {
            id: RunId(1),
            uid: None,
            origin: None,
            pipeline: "p".into(),
            file: None,
            started_ms: 0,
            ended_ms: None,
            status: RunStatus::Succeeded,
            git_commit: None,
            git_dirty: None,
            overrides: overrides_in_argv(&argv),
            sweep: false,
            argv,
            params: Value::Null,
            directions: BTreeMap::new(),
            stages: Vec::new(),
            name: None,
            tags: Vec::new(),
            labels_ms: None,
            unverified: Vec::new(),
            branch: None,
            head_commit: None,
        };
        let paths: Vec<String> = record.overridden_params().map(ParamPath::dotted).collect();
        assert_eq!(
            paths,
            ["train.precision", "seed", "lr", "batch", "extra.key"]
        );
    }
}
