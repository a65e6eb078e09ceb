//! Outputs that earlier runs made and no stage declares now, as a run,
//! `status` and `--dry-run` say them (`pipe_engine::orphans`).

/// Outputs of stages no longer in the pipeline, as a run or `status`
/// says them.
pub fn orphans_line(paths: &[String], removed: bool) -> String {
    orphans_said(paths, if removed { "removed" } else { "" })
}

/// What `pipe run --dry-run` says of them, ending its line: they would
/// be removed (`--remove-orphans`) or left in place.
pub fn dry_run_orphans_line(paths: &[String], remove: bool) -> String {
    let done = if remove { "would remove" } else { "" };
    format!("{}\n", orphans_said(paths, done))
}

/// `done`: "removed", "would remove", or "" (left in place).
pub fn orphans_said(paths: &[String], done: &str) -> String {
    let removed = !done.is_empty();
    let count = match paths.len() {
        1 => "1 output".to_string(),
        n => format!("{n} outputs"),
    };
    let listed = shortened(paths);
    if removed {
        format!("{done} {count} that earlier runs made and no stage declares now: {listed}")
    } else {
        format!("{count} that earlier runs made and no stage declares now (a removed sample's, a renamed path's) still there: {listed}; `pipe run --remove-orphans` removes them (their results stay in the cache)")
    }
}

/// The first few of `lines`, and how many more.
pub(crate) fn shortened(lines: &[String]) -> String {
    crate::terminal::first_few(lines, 3, " ")
}
