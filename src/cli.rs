//! Command-line definitions (clap derive); `main.rs` runs them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use clap_complete::engine::{ArgValueCandidates, ArgValueCompleter};

#[derive(Debug, Parser)]
#[command(name = "pipe", version, about = "Declarative ML pipelines with a content-addressed cache", long_about = None)]
pub struct Cli {
    /// Run as if started in DIR.
    #[arg(short = 'C', long = "directory", global = true, value_name = "DIR")]
    pub directory: Option<PathBuf>,
    /// More log output (-v info, -vv debug); `PIPE_LOG` takes a full filter.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args, Clone, Default)]
pub struct PipelineArg {
    /// The pipeline file (default: `pipe.yaml`).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Override a param: `-S train.lr=0.001` (repeatable).
    #[arg(short = 'S', long = "set", value_name = "KEY=VALUE", add = ArgValueCandidates::new(crate::complete::param_paths))]
    pub set: Vec<String>,
    /// Load the pipeline as run RUN was: its pipeline file and its `-S`
    /// values (then any `-S` given here).
    #[arg(long = "run", value_name = "RUN", add = ArgValueCandidates::new(crate::complete::run_refs))]
    pub run: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the pipeline (or the given stages and what they need), reusing cached results.
    Run(RunArgs),
    /// Show each stage as fresh, restorable or stale, and why.
    Status {
        /// Pipeline file (or use -f).
        #[arg(value_name = "FILE")]
        path: Option<PathBuf>,
        #[command(flatten)]
        pipeline: PipelineArg,
        /// Machine-readable output on stdout.
        #[arg(long)]
        json: bool,
        /// Only the stages a run would do something for (stale,
        /// restorable, running); the summary line still counts them all.
        #[arg(long)]
        stale: bool,
        /// Ask the remote cache which stale stages it can restore: the
        /// configured one, or `--remote=URL`.
        #[arg(
            long,
            value_name = "URL",
            num_args = 0..=1,
            require_equals = true,
            default_missing_value = ""
        )]
        remote: Option<String>,
    },
    /// Explain, field by field, why a stage would rerun.
    Why {
        /// An optional pipeline file (as `pipe run` takes it), then the stage.
        #[arg(value_name = "[FILE] STAGE", num_args = 1..=2, required = true, add = ArgValueCandidates::new(crate::complete::stage_names))]
        targets: Vec<String>,
        #[command(flatten)]
        pipeline: PipelineArg,
        /// The stage's state and the changed key fields as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Print the stage graph.
    Dag {
        #[arg(value_name = "FILE")]
        path: Option<PathBuf>,
        #[command(flatten)]
        pipeline: PipelineArg,
        #[arg(long, value_enum, default_value_t = DagFormatArg::Ascii)]
        format: DagFormatArg,
    },
    /// Check a pipeline file without running anything.
    Validate {
        #[arg(value_name = "FILE")]
        path: Option<PathBuf>,
        #[command(flatten)]
        pipeline: PipelineArg,
    },
    /// List recorded runs, newest first; name or remove them.
    #[command(args_conflicts_with_subcommands = true)]
    Runs {
        #[command(subcommand)]
        action: Option<RunsAction>,
        /// How many runs to list.
        #[arg(short = 'n', long, default_value_t = 20)]
        limit: usize,
        /// The runs as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Tag a run (or take tags away with --rm): a tag selects the newest
    /// run holding it, and `compare --where tag=T` every one.
    Tag {
        /// A run number, uid prefix, name, tag, `last`, `last~N` or git ref.
        #[arg(add = ArgValueCandidates::new(crate::complete::run_refs))]
        run: String,
        #[arg(required = true, value_name = "TAG")]
        tags: Vec<String>,
        /// Take these tags away instead.
        #[arg(long)]
        rm: bool,
    },
    /// Show one run: its key metrics and report first, then params,
    /// stages and every metric.
    Show {
        /// A run id, `last`, `last~N`, or a git ref.
        #[arg(default_value = "last", add = ArgValueCandidates::new(crate::complete::run_refs))]
        run: String,
        /// The whole run record as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Bring the run's report (or `--open=OUTPUT`, one of its outputs)
        /// out of the cache into `.pipe/view/RUN/`, print its path, and
        /// open it in a browser when `$BROWSER` or a display is set. The
        /// workspace is not touched.
        #[arg(long, value_name = "OUTPUT", num_args = 0..=1, require_equals = true, default_missing_value = "")]
        open: Option<String>,
    },
    /// Compare two runs: params, metrics with deltas, stages that reran and
    /// why, changed outputs. Default: the last two successful runs of one
    /// pipeline.
    Diff {
        /// Default: the successful run of B's pipeline before B.
        #[arg(add = ArgValueCandidates::new(crate::complete::run_refs))]
        a: Option<String>,
        /// Default: the newest successful run of the pipeline (`--pipeline`,
        /// else A's, else the newest successful run's).
        #[arg(add = ArgValueCandidates::new(crate::complete::run_refs))]
        b: Option<String>,
        /// The pipeline whose runs are compared when they are not named: a
        /// pipeline name or file (default: the newest successful run's).
        #[arg(long, value_name = "NAME|FILE")]
        pipeline: Option<String>,
        /// The diff as JSON on stdout: raw values, deltas, directions, verdicts.
        #[arg(long, conflicts_with = "md")]
        json: bool,
        /// Markdown, for pull requests and CI summaries.
        #[arg(long)]
        md: bool,
        /// Every metric that changed, not only the key metrics.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        directions: DirectionArgs,
    },
    /// Compare runs side by side: one row per run and matrix combination,
    /// deltas against a baseline, seeds grouped.
    Compare(CompareArgs),
    /// Restore a run's outputs into the workspace from the cache.
    Checkout {
        #[arg(add = ArgValueCandidates::new(crate::complete::run_refs))]
        run: String,
        /// The pipeline file the run ran (default: the one its record
        /// names, else `pipe.yaml` here or above); the record may name
        /// only outputs its stages declare.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: Option<PathBuf>,
        /// Link modes to try, in order: reflink, hardlink, symlink, copy
        /// (default: reflink,copy).
        #[arg(long, value_delimiter = ',')]
        link: Vec<String>,
        /// Overwrite workspace files the cache cannot give back (edited
        /// outputs, untracked files inside output directories); exit 5
        /// without it.
        #[arg(long)]
        force: bool,
    },
    /// Bring a run back whole: its params written into the files that set
    /// them (in place, comments kept) and its outputs restored, so that
    /// `pipe status` is all fresh.
    Apply {
        #[arg(add = ArgValueCandidates::new(crate::complete::run_refs))]
        run: String,
        /// Of a sweep run, the combination to bring back, by its swept
        /// values as `pipe compare` shows them: `--row lr=1e-4,seed=2`.
        #[arg(long, value_name = "KEY=VALUE,...")]
        row: Option<String>,
        /// The pipeline file the run ran (default: the one its record
        /// names, else `pipe.yaml` here or above).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: Option<PathBuf>,
        /// Link modes to try, in order: reflink, hardlink, symlink, copy
        /// (default: reflink,copy).
        #[arg(long, value_delimiter = ',')]
        link: Vec<String>,
        /// Overwrite params files with uncommitted edits and workspace
        /// files the cache cannot give back; exit 5 without it.
        #[arg(long)]
        force: bool,
    },
    /// Inspect and maintain the cache.
    Cache {
        #[command(subcommand)]
        command: CacheCommand,
    },
    /// List the built-in stages, or describe one (`pipe stages text/tokenize`).
    Stages {
        /// A stage name, optionally with `@VERSION`.
        name: Option<String>,
        /// The catalog entries as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Ask the built-in workers to describe their stages (building them
        /// first in a source checkout) and check that they agree with the
        /// catalog built into pipe, which a run that starts no worker uses.
        #[arg(long, conflicts_with_all = ["name", "json"])]
        check: bool,
    },
    /// Print the script that completes pipe in SHELL: commands, flags,
    /// and the project's stage names, run ids and params (docs/cli.md).
    Completions { shell: clap_complete::Shell },
    /// Start a project: a pipeline from a template, its helper scripts and
    /// a .gitignore, in DIR (default: here); never overwrites a file.
    Init {
        #[arg(value_name = "DIR")]
        path: Option<PathBuf>,
        /// quickstart: fine-tune MiniLM on Rotten Tomatoes snippets (the
        /// repository's quickstart); commands: shell-command stages, Python only.
        #[arg(long, value_enum, default_value_t = TemplateArg::Quickstart)]
        template: TemplateArg,
        /// Write pipe.yaml from the DVC project's dvc.yaml in DIR, listing
        /// what it cannot carry (docs/coming-from-dvc.md).
        #[arg(long, conflicts_with = "template")]
        from_dvc: bool,
    },
    /// Works out a recorded run's git dirty flag and writes it into the
    /// run's row: started by `pipe run` in a session of its own, so that a
    /// run in a large repository does not wait for `git status`.
    #[command(name = "__settle-git-dirty", hide = true)]
    SettleGitDirty {
        runs_db: PathBuf,
        run_id: pipe_engine::RunId,
        work_tree: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TemplateArg {
    Quickstart,
    Commands,
}

/// `pipe runs name|rm`.
#[derive(Debug, Subcommand)]
pub enum RunsAction {
    /// Give a run a name, which selects it as its number and uid do.
    Name {
        #[arg(add = ArgValueCandidates::new(crate::complete::run_refs))]
        run: String,
        /// The name: letters, digits, `.`, `_`, `-`, starting with a letter.
        #[arg(required_unless_present = "clear")]
        name: Option<String>,
        /// Take the run's name away.
        #[arg(long, conflicts_with = "name")]
        clear: bool,
    },
    /// Remove runs from the history; their results stay in the cache
    /// until `pipe cache gc`, which keeps those another run recorded.
    Rm {
        #[arg(required = true, add = ArgValueCandidates::new(crate::complete::run_refs))]
        runs: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// An optional pipeline file (ending in .yaml/.yml), then stage names.
    #[arg(value_name = "FILE_OR_STAGE", add = ArgValueCompleter::new(crate::complete::run_targets))]
    pub targets: Vec<String>,
    #[command(flatten)]
    pub pipeline: PipelineArg,
    /// Run this stage even if its result is cached (repeatable).
    #[arg(long, value_name = "STAGE", add = ArgValueCandidates::new(crate::complete::stage_names))]
    pub force: Vec<String>,
    /// Run every selected stage even if cached.
    #[arg(long)]
    pub force_all: bool,
    /// Show what would run, and why, without running it (`-n`, as in make
    /// and Snakemake).
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Remove the outputs of stages no longer in the pipeline (a deleted
    /// sample's) from the work tree before running; their results stay
    /// in the cache. `pipe status` lists them.
    #[arg(long)]
    pub remove_orphans: bool,
    /// Name the run: the name selects it as its number and uid do
    /// (`pipe show NAME`), and travels with `pipe cache push`.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// A sweep: each `-S` with comma-separated values is an axis, and each
    /// combination one run (`-m -S train.lr=1e-4,3e-4 -S seed=1,2`: 4 runs).
    #[arg(short = 'm', long)]
    pub multirun: bool,
    /// Parallel CPU slots (default: the number of cores); under Slurm, the
    /// most jobs in the queue at once (default 100).
    #[arg(short, long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Link modes to restore outputs with, in order: reflink, hardlink,
    /// symlink, copy (default: reflink,copy).
    #[arg(long, value_delimiter = ',', value_name = "MODES")]
    pub link: Vec<String>,
    /// Where stages run: here, or one Slurm batch job per stage (over
    /// PIPE_EXECUTOR, the pipeline's `executor:` and pipe.config.yaml).
    #[arg(long, value_enum)]
    pub executor: Option<ExecutorArg>,
    /// Print machine-readable events on stdout (JSON lines).
    #[arg(long)]
    pub json: bool,
    /// The last lines a command stage printed, shown under its line when
    /// it succeeds (its full log is named); 0 shows none. A failed stage
    /// always shows its last 20.
    #[arg(
        long,
        value_name = "N",
        env = "PIPE_OUTPUT_LINES",
        default_value_t = 10
    )]
    pub output_lines: usize,
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// Which remote cache to use, over `PIPE_REMOTE`, the pipeline's
/// `cache.remote` and pipe.config.yaml (docs/remote-cache.md).
#[derive(Debug, Args, Clone, Default)]
pub struct RemoteArgs {
    /// The remote cache: s3://BUCKET/PREFIX, file:///PATH, or `off`.
    #[arg(long, value_name = "URL|off")]
    pub remote: Option<String>,
    /// Pull from the remote cache, never write to it (e.g. a fork's pull request).
    #[arg(long)]
    pub remote_read_only: bool,
}

/// `--higher`/`--lower`: which way a metric improves, over the built-in
/// rules (loss, time, memory lower; accuracy, F1, throughput higher).
#[derive(Debug, Args, Clone, Default)]
pub struct DirectionArgs {
    /// Higher is better for this metric (`val_acc`, `train.val_acc`; repeatable).
    #[arg(long, value_name = "METRIC")]
    pub higher: Vec<String>,
    /// Lower is better for this metric (repeatable).
    #[arg(long, value_name = "METRIC")]
    pub lower: Vec<String>,
}

impl DirectionArgs {
    pub fn rules(self) -> pipe_engine::DirectionRules {
        pipe_engine::DirectionRules::new(self.higher, self.lower)
    }
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Runs: ids, `last`, `last~N`, git refs (default: the newest 10 that
    /// match the filters).
    #[arg(value_name = "RUN", add = ArgValueCandidates::new(crate::complete::run_refs))]
    pub runs: Vec<String>,
    /// The N newest runs that match the filters.
    #[arg(long, value_name = "N", conflicts_with = "runs")]
    pub last: Option<usize>,
    /// Only runs of this pipeline: a name or a pipeline file (default:
    /// the newest selected run's pipeline, unless runs are named).
    #[arg(long, value_name = "NAME|FILE")]
    pub pipeline: Option<String>,
    /// Only runs whose param has this value: `--where train.lr=0.001`
    /// (repeatable; the value is read as a YAML scalar).
    #[arg(long = "where", value_name = "PARAM=VALUE", add = ArgValueCandidates::new(crate::complete::param_paths))]
    pub where_: Vec<String>,
    /// Only runs that ended so (comma-separated; `any` for all). Default:
    /// succeeded, except for runs named as RUN.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "STATUS")]
    pub status: Vec<StatusArg>,
    /// The run the others are compared with (default: the first row's).
    #[arg(long, value_name = "RUN", add = ArgValueCandidates::new(crate::complete::run_refs))]
    pub baseline: Option<String>,
    /// The baseline's row in a matrix run: `precision=32-true,strategy=single`.
    #[arg(long, value_name = "KEY=VALUE,...")]
    pub baseline_row: Option<String>,
    /// Order rows best first by this metric (`train.val_acc`, or `val_acc`).
    #[arg(long, value_name = "METRIC")]
    pub sort: Option<String>,
    /// One line per seed instead of mean ± std over seeds.
    #[arg(long)]
    pub per_seed: bool,
    /// Every column: also metrics that are not key metrics, those equal in
    /// all rows, text metrics and metrics that repeat a param.
    #[arg(long = "all-columns", visible_alias = "all")]
    pub all: bool,
    /// Show these metrics instead of the key metrics: `STAGE.METRIC` or
    /// `METRIC`, `*` for any text (`--metrics 'train.throughput.*'`;
    /// repeatable).
    #[arg(long, value_name = "GLOB")]
    pub metrics: Vec<String>,
    #[command(flatten)]
    pub directions: DirectionArgs,
    /// The table model as JSON on stdout: columns, rows, groups, baseline,
    /// warnings (raw values).
    #[arg(long, conflicts_with_all = ["md", "csv"])]
    pub json: bool,
    /// Markdown, for a pull-request comment.
    #[arg(long, conflicts_with = "csv")]
    pub md: bool,
    /// One line per row, raw values.
    #[arg(long, conflicts_with = "html")]
    pub csv: bool,
    /// One self-contained HTML page: the table (every column, those shown
    /// without --all ticked), and the curves of every row overlaid, rows
    /// and lines to filter and hide (`pipe compare --html > compare.html`).
    #[arg(long, conflicts_with_all = ["json", "md"])]
    pub html: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    Succeeded,
    Failed,
    Interrupted,
    Running,
    Any,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ExecutorArg {
    Local,
    Slurm,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DagFormatArg {
    Ascii,
    Dot,
    Mermaid,
}

#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// Rehash every object and check every action; exit 4 if any is corrupt.
    Verify {
        /// The report as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Remove corrupt objects and the action results that need them
        /// (their stages run again); exit 0 once removed.
        #[arg(long)]
        repair: bool,
    },
    /// Delete what neither the current pipeline nor the last N runs reference.
    Gc {
        #[command(flatten)]
        pipeline: PipelineArg,
        /// Keep what the newest N runs reference.
        #[arg(long, default_value_t = 10)]
        keep_runs: usize,
        /// Keep entries younger than this many seconds (protects concurrent runs).
        #[arg(long, default_value_t = 3600)]
        grace_secs: u64,
        /// The remote whose stale temporaries (what killed pushes left in a
        /// `file://` remote's tmp/) are removed too; default: the configured one.
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Send a run's results (outputs, metrics) and its record to the remote cache.
    Push {
        /// A run id, `last`, `last~N` or a git ref (default: the last run).
        #[arg(value_name = "RUN", conflicts_with = "all", add = ArgValueCandidates::new(crate::complete::run_refs))]
        run: Option<String>,
        /// Every run recorded here.
        #[arg(long)]
        all: bool,
        /// Read the remote from this pipeline file's `cache.remote`.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: Option<PathBuf>,
        #[command(flatten)]
        remote: RemoteArgs,
        /// Transfer events and the totals as JSON lines on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Bring run records from the remote cache, and with RUN or --all the
    /// results they name, so `pipe checkout RUN` works offline.
    Pull {
        /// A run id, `last~N` or a git ref (e.g. `main`: the latest run
        /// recorded at that commit, here or in the remote).
        #[arg(value_name = "RUN", conflicts_with = "all", add = ArgValueCandidates::new(crate::complete::run_refs))]
        run: Option<String>,
        /// Every run record in the remote, and every result they name.
        #[arg(long)]
        all: bool,
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: Option<PathBuf>,
        #[command(flatten)]
        remote: RemoteArgs,
        /// Transfer events and the totals as JSON lines on stdout.
        #[arg(long)]
        json: bool,
    },
    /// What the remote cache holds of a run's results (default: the last run).
    Status {
        #[arg(value_name = "RUN", add = ArgValueCandidates::new(crate::complete::run_refs))]
        run: Option<String>,
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: Option<PathBuf>,
        #[command(flatten)]
        remote: RemoteArgs,
        /// What the remote holds, as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_definition_is_consistent() {
        <super::Cli as clap::CommandFactory>::command().debug_assert();
    }
}
