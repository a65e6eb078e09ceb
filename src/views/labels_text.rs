//! What `pipe runs name`, `pipe runs rm` and `pipe tag` say they changed.

use pipe_engine::RunId;

/// `run #3 is named `baseline``, or that it has none now.
pub fn named(id: RunId, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("run #{id} is named `{name}`"),
        None => format!("run #{id} has no name"),
    }
}

/// `pipe run --name NAME` that recorded no run (every stage fresh): the
/// name is given to none.
pub fn not_named(name: &str) -> String {
    format!("note: no run was recorded, so none is named `{name}`; the run that made these results takes it with `pipe runs name RUN {name}`\n")
}

/// `removed run #3 (uid 1a2b3c4d): ...`, and what becomes of its results.
pub fn removed(id: RunId, uid: Option<&str>, only_it: usize, shared: usize) -> String {
    let uid = uid
        .map(|uid| format!(" (uid {})", &uid[..uid.len().min(8)]))
        .unwrap_or_default();
    format!("removed run #{id}{uid}: {}", results_left(only_it, shared))
}

/// A run's tags after `pipe tag`.
pub fn tags(id: RunId, now: &[String]) -> String {
    if now.is_empty() {
        format!("run #{id} has no tags")
    } else {
        format!("run #{id} is tagged {}", now.join(", "))
    }
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
