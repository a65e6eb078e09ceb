//! `pipe runs name`, `pipe runs rm` and `pipe tag`: what a team gives
//! runs after the fact. Each resolves its runs as every command does, calls
//! the history, and says what changed.

use pipe_engine::{ExitCode, Pull, Result};

use crate::cli::RunsAction;
use crate::here;
use crate::output::out;
use crate::views::labels_text;

pub fn runs_action(action: RunsAction) -> Result<ExitCode> {
    match action {
        RunsAction::Name { run, name, clear } => {
            let mut history = here::history()?;
            let id = here::resolve(&mut history, &run, Pull::Never)?;
            let name = if clear { None } else { name };
            history.db.set_name(id, name.as_deref())?;
            out!("{}\n", labels_text::named(id, name.as_deref()));
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
        out!(
            "{}\n",
            labels_text::removed(
                removed.id,
                removed.uid.as_deref(),
                removed.results_only_it_had,
                removed.results_shared
            )
        );
    }
    Ok(ExitCode::Ok)
}

pub fn tag(run: &str, tags: &[String], remove: bool) -> Result<ExitCode> {
    let mut history = here::history()?;
    let id = here::resolve(&mut history, run, Pull::Never)?;
    let now = if remove {
        history.db.retag(id, &[], tags)?
    } else {
        history.db.retag(id, tags, &[])?
    };
    out!("{}\n", labels_text::tags(id, &now));
    Ok(ExitCode::Ok)
}
