use std::path::PathBuf;

use pipe_cache::RemoteError;

use crate::diagnostic::Diagnostic;
use crate::run_id::RunId;

/// Documented process exit codes (docs/cli.md). The binary maps every
/// error to one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    Ok = 0,
    /// A stage failed; independent stages still ran.
    StageFailed = 1,
    /// The pipeline file or the command line is wrong: fix the input.
    InvalidInput = 2,
    /// The environment failed: I/O, permissions, database, lock.
    Environment = 3,
    /// `pipe cache verify` found corrupt entries.
    CorruptCache = 4,
    /// `pipe checkout` would overwrite or delete workspace files that the
    /// cache cannot give back, or `pipe init` would overwrite a file;
    /// nothing was changed.
    WouldLoseFiles = 5,
    /// `pipe cache push|pull|status` could not reach the remote cache, or
    /// it refused; a run never fails for this (it goes on locally).
    RemoteUnavailable = 6,
    /// A bug in pipe.
    Internal = 101,
    /// Stopped by Ctrl-C or SIGTERM.
    Interrupted = 130,
}

/// What the engine's fallible functions return: beside the error it is
/// about, so that `lib.rs` only declares and re-exports.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// One or more problems in the pipeline file; each renders with its location.
    #[error("{}", render_diagnostics(.0))]
    Spec(Vec<Diagnostic>),
    #[error(transparent)]
    Cache(#[from] pipe_cache::CacheError),
    /// The remote cache could not be reached or refused (`pipe cache
    /// push|pull|status`; a run goes on without it instead).
    #[error("{0}")]
    RemoteUnavailable(RemoteError),
    #[error("I/O error on `{path}`: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("run database `{path}`: {source}")]
    Database {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    /// A value read back from runs.db that does not parse: never read as
    /// a default, since a run that seems to have no outputs would make
    /// `pipe checkout` restore nothing and succeed.
    #[error("run database `{path}`: {place}: column `{column}` is damaged: {problem}\nhint: this record cannot be trusted; name another run (`pipe runs` lists them), or move .pipe/runs.db aside to start a new history (the cache is kept)")]
    CorruptRecord {
        path: PathBuf,
        /// `run #12, stage \`train\``.
        place: String,
        column: String,
        problem: String,
    },
    /// The command line, a setting or the history cannot give what was
    /// asked: the user's to fix.
    #[error("{0}\nhint: {hint}", hint = .0.hint())]
    Usage(UsageError),
    #[error("interrupted")]
    Interrupted,
    /// A run the history had a moment ago is gone from it.
    #[error("internal error: run #{id} vanished\n{bug}", bug = BUG)]
    RunVanished { id: RunId },
    #[error("internal error: {0}\n{bug}", bug = BUG)]
    Internal(String),
}

const BUG: &str = "this is a bug in pipe; please report it";

impl From<UsageError> for EngineError {
    fn from(usage: UsageError) -> Self {
        EngineError::Usage(usage)
    }
}

impl EngineError {
    pub fn database(path: &std::path::Path, source: rusqlite::Error) -> Self {
        EngineError::Database {
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EngineError::Io {
            path: path.into(),
            source,
        }
    }

    /// A usage error of its own kind, said once: the recurring ones are
    /// [`UsageError`] variants.
    pub fn usage(message: impl Into<String>, hint: impl Into<String>) -> Self {
        EngineError::Usage(UsageError::Other {
            message: message.into(),
            hint: hint.into(),
        })
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            EngineError::Usage(UsageError::UnknownRun {
                why: NoSuchRun::RemoteUnreadable { .. },
                ..
            }) => ExitCode::RemoteUnavailable,
            EngineError::Spec(_) | EngineError::Usage(_) => ExitCode::InvalidInput,
            EngineError::Cache(_)
            | EngineError::Io { .. }
            | EngineError::Database { .. }
            | EngineError::CorruptRecord { .. } => ExitCode::Environment,
            EngineError::RemoteUnavailable(_) => ExitCode::RemoteUnavailable,
            EngineError::Interrupted => ExitCode::Interrupted,
            EngineError::RunVanished { .. } | EngineError::Internal(_) => ExitCode::Internal,
        }
    }
}

/// What the user asked for that cannot be done, and how to ask instead:
/// the message is the variant's `Display`, the hint [`UsageError::hint`],
/// and `EngineError::Usage` shows both as `MESSAGE\nhint: HINT`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UsageError {
    /// A run reference (`12`, `last~2`, a git ref) that names no run.
    #[error("no run matches `{query}`")]
    UnknownRun { query: String, why: NoSuchRun },
    /// A run reference that fits several runs (a uid prefix, a name two
    /// runs hold after a pull): each candidate, described.
    #[error("`{query}` names {} runs: {}", .candidates.len(), .candidates.join("; "))]
    AmbiguousRun {
        query: String,
        candidates: Vec<String>,
    },
    /// A name or tag that could not be told from other run references.
    #[error("{kind} `{label}` {problem}")]
    BadLabel {
        kind: &'static str,
        label: String,
        problem: String,
    },
    /// A name another run here already holds.
    #[error("the name `{name}` is run #{holder}'s")]
    NameTaken { name: String, holder: RunId },
    #[error("no runs recorded in this project yet")]
    NoRuns,
    /// `pipe compare`'s selection (`--where`, `--status`, `--pipeline`,
    /// the runs named) leaves no run.
    #[error("no run matches the selection")]
    NoRunSelected,
    /// A run record names a pipeline file that is not in the workspace.
    #[error("run #{run} ran the pipeline file `{file}`, which is not here")]
    RecordedFileGone { run: RunId, file: String },
    /// `--pipeline NAME` that names no pipeline with runs, nor a file.
    #[error("no run of a pipeline `{name}` is recorded, and there is no file `{name}`")]
    UnknownPipeline {
        name: String,
        suggestion: Option<String>,
        recorded: Vec<String>,
    },
    /// A stage name on the command line that the pipeline lacks.
    #[error("no stage named `{name}` in `{}`", .file.display())]
    UnknownStage {
        name: String,
        file: PathBuf,
        suggestion: Option<String>,
        known: Vec<String>,
    },
    /// `pipe stages NAME` for a stage no worker offers.
    #[error("no stage `{name}`")]
    UnknownCatalogStage {
        name: String,
        suggestion: Option<String>,
        known: Vec<String>,
    },
    #[error(
        "no pipeline file: there is no `pipe.yaml` in this directory or above it in the project"
    )]
    NoPipelineFile,
    /// A `-S` argument that is not `[+|++]key.path=value` with a YAML
    /// value: refused where the command line is read.
    #[error("`-S {argument}`: {problem}")]
    BadOverride {
        argument: String,
        problem: String,
        hint: String,
    },
    /// `pipe run -m` whose `-S` values cannot be swept.
    #[error("cannot sweep `-S {argument}`: {why}")]
    BadSweep { argument: String, why: String },
    #[error("no stage named")]
    NoStageNamed,
    /// `params.yaml` changed between reading the pipeline and writing the
    /// run's `-S` values into it.
    #[error("`{}` changed after the pipeline was read", .file.display())]
    ParamsFileChanged { file: PathBuf },
    #[error("`{}` is a symbolic link or not a regular file, and pipe writes `-S` values only into a regular file", .file.display())]
    ParamsFileNotRegular { file: PathBuf },
    /// A file pipe writes params into that has other names (hard links):
    /// renaming over it would leave them the old bytes, writing it in
    /// place would give them the new ones.
    #[error("`{}` has {links} names (hard links), and pipe writes params only into a file of one name: replacing it would leave its other names the old values, writing it in place would change them too", .file.display())]
    ParamsFileLinked { file: PathBuf, links: u64 },
    #[error("two pipeline files given: `{}` and `{}`", .positional.display(), .flag.display())]
    TwoPipelineFiles { positional: PathBuf, flag: PathBuf },
    /// `hint` depends on how the file was named.
    #[error("pipeline file `{}` does not exist", .file.display())]
    /// `with_extension`: the same path with `.yaml`/`.yml`, when that is a
    /// file (`pipe run pipelines/quickstart`).
    PipelineFileMissing {
        file: PathBuf,
        hint: &'static str,
        with_extension: Option<PathBuf>,
    },
    /// `inside`: the pipeline file in that directory, when there is one.
    #[error("`{}` is a directory, not a pipeline file", .file.display())]
    PipelineFileIsDirectory {
        file: PathBuf,
        inside: Option<PathBuf>,
    },
    #[error("pipeline file `{}` is not a regular file", .file.display())]
    PipelineFileNotRegular { file: PathBuf },
    #[error("`{}` is larger than {limit} bytes", .file.display())]
    PipelineFileTooLarge { file: PathBuf, limit: u64 },
    #[error("`{}` is larger than {limit} bytes", .file.display())]
    SettingsFileTooLarge { file: PathBuf, limit: u64 },
    /// `flag`: how this command names a remote (`--remote URL`).
    #[error("no remote cache is configured")]
    NoRemote { flag: &'static str },
    #[error("the remote cache {url} is read-only here")]
    RemoteReadOnly { url: String },
    /// The remote's URL or options are wrong.
    #[error("{0}")]
    BadRemote(RemoteError),
    /// `--where` text that is not `PARAM=VALUE`.
    #[error("bad `--where {condition}`: {why}")]
    BadWhere {
        condition: String,
        why: WhereProblem,
    },
    /// `--where` on a param no compared run has.
    #[error("`--where {condition}`: no recorded run has a param `{path}`")]
    UnknownWhereParam {
        condition: String,
        path: String,
        suggestion: Option<String>,
        known: Vec<String>,
    },
    #[error("bad `--baseline-row {text}`: `{pair}` is not KEY=VALUE")]
    BadBaselineRow { text: String, pair: String },
    #[error("the baseline run #{run} is not among the compared runs")]
    BaselineNotCompared { run: RunId },
    /// `keys`: the matrix keys the run has.
    #[error("run #{run} has no matrix key `{key}`")]
    NoMatrixKey {
        run: RunId,
        key: String,
        keys: Vec<String>,
    },
    /// `rows`: the run's rows, labelled.
    #[error("no row of run #{run} matches `--baseline-row`")]
    NoBaselineRow { run: RunId, rows: Vec<String> },
    /// `rows`: the rows that match, labelled.
    #[error("{} rows of run #{run} match the baseline: {}", .rows.len(), .rows.join("; "))]
    AmbiguousBaselineRow { run: RunId, rows: Vec<String> },
    /// `shown`: the metric columns there are.
    #[error("no metric `{name}` to sort by")]
    UnknownSortMetric { name: String, shown: Vec<String> },
    /// `columns`: the stages' columns of that metric.
    #[error("`{name}` is a metric of several stages")]
    AmbiguousSortMetric { name: String, columns: Vec<String> },
    #[error("`{column}` has no known direction to sort by")]
    NoSortDirection { column: String },
    /// `pipe diff A` where A is the newest successful run.
    #[error("run #{run} is the newest successful run of `{pipeline}`: there is nothing after it to compare it with")]
    NothingAfter { run: RunId, pipeline: String },
    #[error("run #{run} is the only successful run{} to compare: `pipe diff` compares the last two", of_pipeline(.pipeline))]
    OnlySuccessfulRun {
        run: RunId,
        pipeline: Option<String>,
    },
    #[error("no successful run{} is recorded", of_pipeline(.pipeline))]
    NoSuccessfulRun { pipeline: Option<String> },
    /// A Slurm partition with no nodes; `known`: the partitions there are.
    #[error("Slurm has no {partition} with nodes")]
    NoPartition {
        /// `partition \`gpu\`` or `the default partition`.
        partition: String,
        known: Vec<String>,
    },
    #[error("run database `{}` has version {version}, written by a newer pipe (this one reads up to {reads})", .path.display())]
    NewerDatabase {
        path: PathBuf,
        version: i64,
        reads: i64,
    },
    /// Said once, where it happens.
    #[error("{message}")]
    Other { message: String, hint: String },
}

impl UsageError {
    /// The hint of an error about a file pipe writes params into.
    fn params_file_hint(&self) -> String {
        match self {
            UsageError::ParamsFileNotRegular { .. } => {
                "nothing ran; put the params in a regular params.yaml beside the pipeline file, or pass them to the command with `${params.X}`".to_string()
            }
            UsageError::ParamsFileLinked { file, .. } => {
                let name = file.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
                format!("nothing ran and nothing was written; give it a copy of its own (`cp {name} {name}.copy && mv {name}.copy {name}`), or pass the params to the command with `${{params.X}}`")
            }
            UsageError::ParamsFileChanged { .. } => {
                "nothing ran; run the command again once the file is saved: pipe writes `-S` values into the file as it read it".to_string()
            }
            _ => String::new(),
        }
    }

    /// How to fix it: the `hint:` line.
    pub fn hint(&self) -> String {
        match self {
            UsageError::UnknownRun { why, .. } => why.to_string(),
            UsageError::AmbiguousRun { .. } => {
                "name one of them by its number or a longer uid prefix (`pipe runs` shows both)"
                    .to_string()
            }
            UsageError::BadLabel { .. } => {
                "use letters, digits, `.`, `_` and `-`, starting with a letter, at most 64 \
                 characters; not `last`"
                    .to_string()
            }
            UsageError::NameTaken { holder, .. } => format!(
                "choose another name, or take it from run #{holder} first with `pipe runs name {holder} --clear`"
            ),
            UsageError::NoRuns => "run a pipeline first: `pipe run`".to_string(),
            UsageError::NoRunSelected => "`pipe runs` lists the recorded runs; `--status any` \
                 includes those that failed"
                .to_string(),
            UsageError::NoStageNamed => "name one, e.g. `pipe why train`".to_string(),
            UsageError::BadOverride { hint, .. } => hint.clone(),
            UsageError::BadSweep { .. } => "write each swept param once with its values comma-separated, e.g. `pipe run -m -S train.lr=1e-4,3e-4 -S seed=1,2`".to_string(),
            UsageError::ParamsFileNotRegular { .. }
            | UsageError::ParamsFileLinked { .. }
            | UsageError::ParamsFileChanged { .. } => self.params_file_hint(),
            UsageError::RecordedFileGone { .. } => {
                "pass the pipeline file the run ran with -f FILE".to_string()
            }
            UsageError::UnknownPipeline {
                suggestion,
                recorded,
                ..
            } => {
                if recorded.is_empty() {
                    "run a pipeline first: `pipe run`".to_string()
                } else {
                    format!(
                        "{}pipelines with recorded runs: {}; or name a pipeline file",
                        did_you_mean(suggestion),
                        recorded.join(", ")
                    )
                }
            }
            UsageError::UnknownStage {
                suggestion, known, ..
            }
            | UsageError::UnknownCatalogStage {
                suggestion, known, ..
            } => format!("{}stages: {}", did_you_mean(suggestion), known.join(", ")),
            UsageError::NoPipelineFile => {
                "pass one, e.g. `pipe run pipelines/quickstart.yaml`, or use -f FILE".to_string()
            }
            UsageError::TwoPipelineFiles { .. } => {
                "give the file once, positionally or with -f".to_string()
            }
            UsageError::PipelineFileMissing {
                with_extension: Some(file),
                ..
            } => format!("did you mean `{}`?", file.display()),
            UsageError::PipelineFileMissing { hint, .. } => hint.to_string(),
            UsageError::PipelineFileIsDirectory { file, inside } => match inside {
                Some(inside) => format!("did you mean `{}`?", inside.display()),
                None => format!(
                    "name the YAML file, e.g. `{}`, or run pipe inside that directory (`-C {}`)",
                    file.join("pipe.yaml").display(),
                    file.display()
                ),
            },
            UsageError::PipelineFileNotRegular { .. } => "name a YAML file".to_string(),
            UsageError::PipelineFileTooLarge { .. } => {
                "name a pipeline file, or a pipeline by its name".to_string()
            }
            UsageError::SettingsFileTooLarge { .. } => "a settings file is a few lines".to_string(),
            UsageError::NoRemote { flag } => format!(
                "pass {flag}, set PIPE_REMOTE, or add `cache: {{ remote: s3://BUCKET/PREFIX }}` \
                 to the pipeline or {} (docs/remote-cache.md)",
                crate::project_files::PROJECT_CONFIG_FILE
            ),
            UsageError::RemoteReadOnly { .. } => "a read-only remote is never written; drop \
                 --remote-read-only, PIPE_REMOTE_READ_ONLY or `read_only: true` to push"
                .to_string(),
            UsageError::BadRemote(_) => {
                "see docs/remote-cache.md for the URL forms and settings".to_string()
            }
            UsageError::BadWhere { .. } => "write PARAM=VALUE with PARAM a dotted path in the \
                 params, e.g. `--where train.lr=0.001`"
                .to_string(),
            UsageError::UnknownWhereParam {
                suggestion, known, ..
            } => {
                let listed: Vec<&str> = known.iter().map(String::as_str).take(12).collect();
                let more = match known.len() - listed.len() {
                    0 => String::new(),
                    more => format!(" and {more} more"),
                };
                format!(
                    "{}params the runs recorded: {}{more}",
                    did_you_mean(suggestion),
                    listed.join(", ")
                )
            }
            UsageError::BadBaselineRow { .. } => {
                "name matrix values, e.g. `--baseline-row precision=32-true,strategy=single`"
                    .to_string()
            }
            UsageError::BaselineNotCompared { .. } => {
                "name it among the runs, or choose another with `--baseline RUN`".to_string()
            }
            UsageError::NoMatrixKey { keys, .. } => {
                if keys.is_empty() {
                    "it has no matrix; leave out `--baseline-row`".to_string()
                } else {
                    format!("its matrix keys: {}", keys.join(", "))
                }
            }
            UsageError::NoBaselineRow { rows, .. } => format!("its rows: {}", rows.join("; ")),
            UsageError::AmbiguousBaselineRow { .. } => "name more matrix values in \
                 `--baseline-row`, e.g. `precision=32-true,strategy=single`"
                .to_string(),
            UsageError::UnknownSortMetric { shown, .. } => {
                format!("metrics shown: {}", shown.join(", "))
            }
            UsageError::AmbiguousSortMetric { columns, .. } => {
                format!("name one: {}", columns.join(", "))
            }
            UsageError::NoSortDirection { column } => {
                format!("say which way is better: `--higher {column}` or `--lower {column}`")
            }
            UsageError::NothingAfter { run, .. } => {
                format!("name the run to compare it with: `pipe diff {run} B`")
            }
            UsageError::OnlySuccessfulRun { .. } => "run the pipeline again with a change \
                 (`pipe run -S KEY=VALUE`), or name two runs: `pipe diff A B` (`pipe runs` \
                 lists them)"
                .to_string(),
            UsageError::NoSuccessfulRun { .. } => "`pipe runs` lists the runs; name two to \
                 compare them whatever their status: `pipe diff A B`"
                .to_string(),
            UsageError::NoPartition { known, .. } => format!(
                "set `executor: {{ partition: NAME }}` to one of: {}",
                known.join(", ")
            ),
            UsageError::NewerDatabase { .. } => "use that newer pipe here, or move .pipe/runs.db \
                 aside to start a new history (the cache is kept)"
                .to_string(),
            UsageError::Other { hint, .. } => hint.clone(),
        }
    }
}

/// Why a run reference names no run; it reads as the hint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoSuchRun {
    #[error("`pipe runs` lists the recorded runs")]
    NoSuchId,
    #[error("there are fewer runs than that; `pipe runs` lists them")]
    TooFewRuns,
    #[error("use a run number, a uid prefix, a name or tag, `last`, `last~N`, or a git ref (branch, tag, commit)")]
    NotARunOrRef,
    /// `commit`: its first 12 digits; `remote`: the remote cache that was
    /// asked too and holds none.
    #[error("no run was recorded at commit {commit}{}", .remote.as_ref().map(|url| format!(", here or in the remote cache {url}")).unwrap_or_default())]
    NoneAtCommit {
        commit: String,
        remote: Option<String>,
    },
    /// No run here at `commit`, and the remote cache that may hold one
    /// could not be read: exit code 6, since the run may well exist.
    #[error("no run was recorded here at commit {commit}, and the remote cache could not be read to look for one: {reason}")]
    RemoteUnreadable { commit: String, reason: String },
    /// A name that is no local ref, though the remote's branch of that
    /// name is (`feat-a` where only `origin/feat-a` exists).
    #[error("`{remote}` is a ref here and no local branch is; use it, or `git switch` to make the branch")]
    NotALocalRef { remote: String },
    /// Every run at the commit a ref names set params with `-S`: none is
    /// that commit's own configuration. `experiments`: each, described.
    #[error("no run at commit {commit} ran its own configuration (without `-S`); the runs there set params: {}; name one by its number, uid or name", .experiments.join("; "))]
    OnlyExperimentsAtCommit {
        commit: String,
        experiments: Vec<String>,
    },
}

/// What is wrong with the text of `--where PARAM=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WhereProblem {
    #[error("no `=`")]
    NoEquals,
    #[error("the param path has an empty name")]
    EmptyName,
    #[error("a param name holds a quote")]
    Quote,
    #[error(transparent)]
    Value(#[from] NotYaml),
}

/// Text that was to be read as a YAML value (`-S key=TEXT`, `--where
/// key=TEXT`) and is not one; the YAML parser's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
pub struct NotYaml {
    pub problem: String,
}

/// `did you mean `X`? ` before a list of what there is, or nothing.
fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map(|close| format!("did you mean `{close}`? "))
        .unwrap_or_default()
}

/// ` of pipeline `NAME``, or nothing for any pipeline.
fn of_pipeline(pipeline: &Option<String>) -> String {
    pipeline
        .as_ref()
        .map(|name| format!(" of pipeline `{name}`"))
        .unwrap_or_default()
}

fn render_diagnostics(diagnostics: &[Diagnostic]) -> String {
    let mut text = diagnostics
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    if diagnostics.len() > 1 {
        text.push_str(&format!(
            "\n{} errors in the pipeline file",
            diagnostics.len()
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usage_error_shows_its_message_then_its_hint_and_exits_2() {
        let error = EngineError::from(UsageError::UnknownRun {
            query: "nosuchref".to_string(),
            why: NoSuchRun::NotARunOrRef,
        });
        assert_eq!(
            error.to_string(),
            "no run matches `nosuchref`\nhint: use a run number, a uid prefix, a name or tag, \
             `last`, `last~N`, or a git ref (branch, tag, commit)"
        );
        assert_eq!(error.exit_code(), ExitCode::InvalidInput);
    }

    #[test]
    fn an_unknown_where_param_suggests_the_closest_and_lists_twelve() {
        let known: Vec<String> = (0..14).map(|index| format!("p{index:02}")).collect();
        let error = UsageError::UnknownWhereParam {
            condition: "p1=3".to_string(),
            path: "p1".to_string(),
            suggestion: Some("p01".to_string()),
            known,
        };
        assert_eq!(
            error.to_string(),
            "`--where p1=3`: no recorded run has a param `p1`"
        );
        let hint = error.hint();
        assert!(
            hint.starts_with("did you mean `p01`? params the runs recorded: p00, p01,"),
            "{hint}"
        );
        assert!(hint.ends_with("p11 and 2 more"), "{hint}");
    }

    #[test]
    fn a_vanished_run_is_a_bug_not_the_users_mistake() {
        let error = EngineError::RunVanished { id: RunId(7) };
        assert_eq!(error.exit_code(), ExitCode::Internal);
        assert_eq!(
            error.to_string(),
            "internal error: run #7 vanished\nthis is a bug in pipe; please report it"
        );
    }
}
