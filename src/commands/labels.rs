//! `pipe runs name`, `pipe runs rm` and `pipe tag`: what a team gives
//! runs after the fact. Each resolves its runs as every command does, calls
//! the history, and says what changed.

use pipe_engine::{ExitCode, Pull, Result};

use crate::cli::RunsAction;
use crate::here;
use crate::output::outln;

pub fn runs_action(action: RunsAction) -> Result<ExitCode> {
    match action {
        RunsAction::Name { run, name, clear } => {
            let mut history = here::history()?;
            let id = here::resolve(&mut history, &run, Pull::Never)?;
            let name = if clear { None } else { name };
            history.db.set_name(id, name.as_deref())?;
            match name {
                Some(name) => outln!("run #{id} is named `{name}`"),
                None => outln!("run #{id} has no name"),
            }
            Ok(ExitCode::Ok)
        }
        RunsAction::Rm { runs } => remove(&runs),
    }
}

/// Resolves every reference first, so that a typo in the third removes
/// nothing, then removes each once.
fn remove(queries: &[String]) -> Result<ExitCode> {
    let mut history = here::history()?;
    let mut ids = Vec::new();
    for query in queries {
        let id = here::resolve(&mut history, query, Pull::Never)?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    for id in ids {
        let removed = history.db.remove_run(id)?;
        let uid = removed
            .uid
            .as_deref()
            .map(|uid| format!(" (uid {})", &uid[..uid.len().min(8)]))
            .unwrap_or_default();
        outln!(
            "removed run #{}{uid}: {}",
            removed.id,
            results_left(removed.results_only_it_had, removed.results_shared)
        );
    }
    Ok(ExitCode::Ok)
}

/// What becomes of a removed run's results, as `pipe cache gc` will treat
/// them.
fn results_left(only_it: usize, shared: usize) -> String {
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    match (only_it, shared) {
        (0, 0) => "it recorded no results".to_string(),
        (0, shared) => format!(
            "its {shared} result{} stay, other runs recorded them too",
            plural(shared)
        ),
        (only_it, shared) => {
            let kept = if shared > 0 {
                format!("{shared} stay for the other runs that recorded them; ")
            } else {
                String::new()
            };
            let (them, stay) = if only_it == 1 {
                ("it", "stays")
            } else {
                ("them", "stay")
            };
            format!(
                "{kept}{only_it} result{} only it recorded {stay} in the cache until `pipe cache gc` removes {them} (unless the pipeline's current stages still have {them}); a pull does not bring the run back",
                plural(only_it)
            )
        }
    }
}

pub fn tag(run: &str, tags: &[String], remove: bool) -> Result<ExitCode> {
    let mut history = here::history()?;
    let id = here::resolve(&mut history, run, Pull::Never)?;
    let now = if remove {
        history.db.retag(id, &[], tags)?
    } else {
        history.db.retag(id, tags, &[])?
    };
    if now.is_empty() {
        outln!("run #{id} has no tags");
    } else {
        outln!("run #{id} is tagged {}", now.join(", "));
    }
    Ok(ExitCode::Ok)
}
