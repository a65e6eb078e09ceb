//! Shell completion that knows the project: stage names, run references
//! and param paths, through clap_complete's dynamic completion. The shell
//! script `pipe completions SHELL` prints calls `COMPLETE=SHELL pipe --
//! WORDS...` at each TAB; `main` answers it before parsing anything, and
//! the candidate functions below read the project around the working
//! directory. A candidate that cannot be worked out (no pipeline, a file
//! with errors, no runs yet) is left out: completion never prints an
//! error into the user's command line.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use clap_complete::engine::{CompletionCandidate, PathCompleter, ValueCompleter};
use clap_complete::env::{Bash, Elvish, EnvCompleter, Fish, Powershell, Zsh};
use pipe_engine::{History, Pipeline, Project, ProjectWorkers, RunSelection};

/// The variable clap_complete's shell scripts set to ask for candidates.
pub const COMPLETE_VAR: &str = "COMPLETE";

/// How many of the newest runs are offered where a run is asked for.
const RUNS_OFFERED: usize = 30;

/// Answers a completion request (`COMPLETE=SHELL pipe -- WORDS...`) and
/// exits; returns at once on an ordinary run.
pub fn answer_if_asked() {
    let asked =
        std::env::var_os(COMPLETE_VAR).is_some_and(|value| !value.is_empty() && value != "0");
    if asked {
        // `pipe -C DIR …` completes what the command will see: DIR's
        // project, and paths relative to DIR.
        if let Some(directory) = typed_directory() {
            let _ = std::env::set_current_dir(directory);
        }
    }
    clap_complete::CompleteEnv::with_factory(<crate::cli::Cli as clap::CommandFactory>::command)
        .var(COMPLETE_VAR)
        .complete();
}

/// The script that registers these completions with `shell`.
pub fn registration(shell: clap_complete::Shell) -> Vec<u8> {
    let completer: &dyn EnvCompleter = match shell {
        clap_complete::Shell::Bash => &Bash,
        clap_complete::Shell::Zsh => &Zsh,
        clap_complete::Shell::Fish => &Fish,
        clap_complete::Shell::Elvish => &Elvish,
        _ => &Powershell,
    };
    // The shell calls this same binary back: by its path when it was
    // started by one, else by name through PATH.
    let invoked = std::env::args_os().next().unwrap_or_default();
    let program = if Path::new(&invoked).components().count() > 1 {
        std::env::current_exe()
            .map(|path| path.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "pipe".to_string())
    } else {
        "pipe".to_string()
    };
    let mut script = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = completer.write_registration(COMPLETE_VAR, "pipe", "pipe", &program, &mut script);
    script
}

/// Help text as the shell will print it: whatever a terminal would obey
/// escaped (`pipe_protocol::terminal`).
fn safe(text: &str) -> String {
    crate::terminal::terminal_safe(text).into_owned()
}

/// Stage names of the pipeline: base names, and each matrix expansion.
pub fn stage_names() -> Vec<CompletionCandidate> {
    let Some(pipeline) = pipeline() else {
        return Vec::new();
    };
    let mut seen = std::collections::HashSet::new();
    let mut candidates = Vec::new();
    for stage in &pipeline.stages {
        for name in [&stage.base_name, &stage.name] {
            if seen.insert(name.clone()) {
                let help = stage.desc.as_deref().map(|desc| safe(desc).into());
                candidates.push(CompletionCandidate::new(name).help(help));
            }
        }
    }
    candidates
}

/// A run target: a stage name, or the pipeline file first.
pub fn run_targets(current: &OsStr) -> Vec<CompletionCandidate> {
    let mut candidates: Vec<CompletionCandidate> = stage_names()
        .into_iter()
        .filter(|candidate| {
            candidate
                .get_value()
                .to_string_lossy()
                .starts_with(&*current.to_string_lossy())
        })
        .collect();
    let yaml_or_dir = |path: &Path| {
        path.is_dir()
            || path
                .extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml")
    };
    candidates.extend(
        PathCompleter::any()
            .filter(yaml_or_dir)
            .complete(current)
            .into_iter()
            .filter(|candidate| candidate.get_value() != "."),
    );
    candidates
}

/// Run ids, newest first, then the references that are not ids.
pub fn run_refs() -> Vec<CompletionCandidate> {
    let mut candidates = Vec::new();
    let root = std::env::current_dir().map(|cwd| Project::find_root(&cwd));
    if let Some(history) = root
        .ok()
        .and_then(|root| History::open_existing(&root).ok().flatten())
    {
        if let Ok(runs) = history
            .db
            .newest_runs(RunSelection::default(), RUNS_OFFERED)
        {
            let mut labels = Vec::new();
            for (order, run) in runs.iter().enumerate() {
                // A pulled record's pipeline name is data from elsewhere.
                let help = safe(&format!("{} {}", run.pipeline, run.status.as_str()));
                candidates.push(
                    CompletionCandidate::new(run.id.to_string())
                        .help(Some(help.clone().into()))
                        .display_order(Some(order)),
                );
                // Names and tags complete too: those that pass the rule
                // every label is held to, which keeps a hand-edited
                // runs.db's text off the terminal.
                for label in run.name.iter().chain(&run.tags) {
                    let well_formed = pipe_engine::check_label("tag", label).is_ok();
                    if well_formed && !labels.contains(label) {
                        labels.push(label.clone());
                        candidates.push(
                            CompletionCandidate::new(label.clone())
                                .help(Some(format!("run #{}: {help}", run.id).into()))
                                .display_order(Some(RUNS_OFFERED + order)),
                        );
                    }
                }
            }
        }
    }
    let order = candidates.len();
    candidates.push(
        CompletionCandidate::new("last")
            .help(Some("the newest run".into()))
            .display_order(Some(order)),
    );
    candidates
}

/// `-S` and `--where`: each param's dotted path, with `=` and its value
/// as help.
pub fn param_paths() -> Vec<CompletionCandidate> {
    let Some(pipeline) = pipeline() else {
        return Vec::new();
    };
    let mut candidates = Vec::new();
    leaf_params(&pipeline.params, String::new(), &mut candidates);
    candidates
}

fn leaf_params(value: &serde_json::Value, path: String, out: &mut Vec<CompletionCandidate>) {
    match value {
        serde_json::Value::Object(entries) if !entries.is_empty() => {
            for (key, value) in entries {
                let path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                leaf_params(value, path, out);
            }
        }
        _ if !path.is_empty() => {
            out.push(
                CompletionCandidate::new(format!("{path}="))
                    .help(Some(safe(&value.to_string()).into())),
            );
        }
        _ => {}
    }
}

/// The pipeline named on the command line being completed (a `.yaml`
/// word, or `-f FILE`), else the one a command would find here.
fn pipeline() -> Option<Pipeline> {
    let file = named_pipeline_file().or_else(|| {
        let cwd = std::env::current_dir().ok()?;
        Project::find_pipeline_file(&cwd)
    })?;
    pipe_engine::load_pipeline(&file, &[], &ProjectWorkers)
        .ok()
        .map(|loaded| loaded.pipeline)
}

/// The words typed before the one being completed: they follow `--` in
/// a completion request, and the last word is unfinished.
fn typed_words() -> Vec<String> {
    let mut args: Vec<String> = std::env::args().collect();
    let Some(start) = args.iter().position(|arg| arg == "--") else {
        return Vec::new();
    };
    args.pop();
    args.drain(..=start.min(args.len().saturating_sub(1)));
    args
}

/// `-C DIR` or `--directory DIR` among the typed words.
fn typed_directory() -> Option<PathBuf> {
    let words = typed_words();
    let mut previous = "";
    for word in &words {
        if matches!(previous, "-C" | "--directory") {
            return Some(PathBuf::from(word));
        }
        if let Some(directory) = word.strip_prefix("--directory=") {
            return Some(PathBuf::from(directory));
        }
        previous = word;
    }
    None
}

fn named_pipeline_file() -> Option<PathBuf> {
    let words = typed_words();
    let mut previous = "";
    for word in &words {
        if matches!(previous, "-f" | "--file") {
            return Some(PathBuf::from(word));
        }
        if let Some(file) = word.strip_prefix("--file=") {
            return Some(PathBuf::from(file));
        }
        let looks_like_file = word.ends_with(".yaml") || word.ends_with(".yml");
        if looks_like_file && !word.starts_with('-') && Path::new(word).is_file() {
            return Some(PathBuf::from(word));
        }
        previous = word;
    }
    None
}
