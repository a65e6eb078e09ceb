//! `pipe status` and `pipe run --dry-run` as text: a line per stage, its
//! state and reasons, then a summary line counting them all.

use std::fmt::Write;

use pipe_engine::{Freshness, StageState};

use crate::views::diff_fold::{base_of, runs_of};
use crate::views::value_text::width;

/// For `--dry-run`: the command of the stage at a position of the states,
/// shown below it when it would run (`Stage::shown_command`).
pub type CommandOf<'a> = &'a dyn Fn(usize) -> Option<String>;

/// The status table, handed to `emit` in pieces of about 64 KiB, so that
/// a million stages are never one string in memory. `dry_run` gives the
/// commands of the stages that would run, as `pipe run --dry-run` shows them.
pub fn status_text(
    states: &[StageState],
    dry_run: Option<CommandOf<'_>>,
    shown: Shown,
    mut emit: impl FnMut(&str),
) {
    const PIECE: usize = 64 * 1024;
    let mut out = String::with_capacity(PIECE + 1024);
    let is_shown = |state: &StageState| shown == Shown::All || state.freshness != Freshness::Fresh;
    let fold = !crate::human_reporter::every_stage();
    let groups = if fold {
        folded_groups(states)
    } else {
        (0..states.len()).map(|at| (at, 1)).collect()
    };
    let names: Vec<String> = groups
        .iter()
        .map(|&(first, count)| match count {
            1 => states[first].stage.clone(),
            n => format!("{} ×{n}", base_of(&states[first].stage)),
        })
        .collect();
    let name_width = width(
        groups
            .iter()
            .zip(&names)
            .filter(|((first, _), _)| is_shown(&states[*first]))
            .map(|(_, name)| name.as_str()),
    );
    for (&(position, count), name) in groups.iter().zip(&names) {
        let state = &states[position];
        if !is_shown(state) {
            continue;
        }
        let label = match (state.freshness, dry_run.is_some()) {
            (Freshness::Fresh, _) => "fresh",
            (Freshness::Restorable, false) => "restorable",
            (Freshness::Restorable, true) => "would restore",
            (Freshness::Stale, false) => "stale",
            (Freshness::Stale, true) => "would run",
            (Freshness::Running, _) => "running",
        };
        let reasons = if state.reasons.is_empty() {
            String::new()
        } else {
            format!("  {}", state.reasons.join("; "))
        };
        let _ = writeln!(out, "{name:<name_width$}  {label}{reasons}");
        let command = match dry_run {
            Some(command_of) if state.freshness == Freshness::Stale => command_of(position),
            _ => None,
        };
        if let Some(command) = command {
            let lines = command.trim_end().replace('\n', "\n      ");
            let _ = writeln!(out, "    > {lines}");
            if count > 1 {
                let _ = writeln!(
                    out,
                    "      (the first of {count}, each with its own values; -v lists them)"
                );
            }
        }
        if out.len() >= PIECE {
            emit(&out);
            out.clear();
        }
    }
    let stale = states
        .iter()
        .filter(|state| state.freshness == Freshness::Stale)
        .count();
    let restorable = states
        .iter()
        .filter(|state| state.freshness == Freshness::Restorable)
        .count();
    let running = states
        .iter()
        .filter(|state| state.freshness == Freshness::Running)
        .count();
    let fresh = states.len() - stale - restorable - running;
    let _ = writeln!(
        out,
        "{} stages: {fresh} fresh, {restorable} restorable, {stale} stale{}{}",
        states.len(),
        if running > 0 {
            format!(", {running} running")
        } else {
            String::new()
        },
        match shown {
            Shown::NotFresh if fresh > 0 => " (the fresh ones not listed)",
            Shown::All if fresh > LONG_LIST && dry_run.is_none() => {
                " (`pipe status --stale` lists only the others)"
            }
            _ => "",
        }
    );
    emit(&out);
}

/// The lines of the table: each a first state's position and how many
/// states in a row it stands for (the expansions of one matrix base that
/// share their state and reasons).
fn folded_groups(states: &[StageState]) -> Vec<(usize, usize)> {
    let same = |a: &StageState, b: &StageState| {
        a.stage.contains('@')
            && base_of(&a.stage) == base_of(&b.stage)
            && a.freshness == b.freshness
            && a.reasons == b.reasons
    };
    runs_of(states.len(), |first, next| {
        same(&states[first], &states[next])
    })
}

/// Which stages `status_text` lists; its summary counts them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    All,
    /// Stale, restorable and running stages.
    NotFresh,
}

/// More fresh stages than this, and the summary points at `--stale`.
const LONG_LIST: usize = 30;

/// What a run going now has done so far, above its status: one line for
/// the run, then each stage it finished with its key metrics (else its
/// first few others), as its record holds them.
pub fn run_going_text(going: &pipe_engine::RunGoing) -> String {
    let run = &going.record;
    let mut out = String::new();
    let now = match going.now.running.as_slice() {
        [] => String::new(),
        running => format!("; running now: {}", running.join(", ")),
    };
    let finished = run.stages.len();
    let _ = writeln!(
        out,
        "run #{} is in progress{}: {finished} {} finished so far{now}",
        run.id,
        going
            .now
            .pid
            .map(|pid| format!(" (pid {pid})"))
            .unwrap_or_default(),
        if finished == 1 { "stage" } else { "stages" },
    );
    let summary = run.summary();
    let mut stages: Vec<&pipe_engine::StageRecord> = run.stages.iter().collect();
    stages.sort_by_key(|stage| stage.identity.position);
    let name_width = width(stages.iter().map(|stage| stage.stage.as_str()));
    for stage in stages {
        let of_stage = |metrics: &[pipe_engine::StageMetric]| -> Vec<String> {
            metrics
                .iter()
                .filter(|metric| metric.stage == stage.stage)
                .filter(|metric| metric.value.is_number() || metric.value.is_boolean())
                .map(|metric| {
                    format!(
                        "{} {}",
                        metric.metric,
                        crate::views::value_text::rounded(&metric.metric, &metric.value)
                    )
                })
                .collect()
        };
        let mut metrics = of_stage(&summary.key_metrics);
        if metrics.is_empty() {
            metrics = of_stage(&summary.other_metrics);
            metrics.truncate(3);
        }
        let _ = writeln!(
            out,
            "  {:<name_width$}  {:<8}  {}",
            stage.stage,
            stage.status.as_str(),
            metrics.join(", ")
        );
    }
    out.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}
