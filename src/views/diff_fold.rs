//! `pipe diff`'s stages and outputs when a matrix has hundreds of
//! expansions: the expansions of one base that changed the same fields
//! are one entry (the first's fields shown, the count said), a stage's
//! many changed dependencies are counted by kind with the first few
//! named, and outputs are grouped by the matrix base of their stage.
//! `-v` (or `--all`) lists everything.

use pipe_engine::{FieldChange, OutputChange, StageChange};

/// A stage's changed fields of one kind (`deps`, `params`) listed one by
/// one up to this many; past it, the first few and a count.
const FIELDS_LISTED: usize = 8;
/// Expansions of one base folded into one entry from this many on.
const FOLDED_FROM: usize = 4;

/// `clean` of `clean@sample=S001`.
pub fn base_of(stage: &str) -> &str {
    stage.split('@').next().unwrap_or(stage)
}

/// Items in a row that `same(first, next)` puts with the first of them,
/// as (first position, count): one entry for a run of [`FOLDED_FROM`] or
/// more, else one per item. What `status`, `diff` and the run output
/// fold a matrix's expansions by.
pub fn runs_of(len: usize, same: impl Fn(usize, usize) -> bool) -> Vec<(usize, usize)> {
    let mut groups = Vec::new();
    let mut at = 0;
    while at < len {
        let mut end = at + 1;
        while end < len && same(at, end) {
            end += 1;
        }
        if end - at >= FOLDED_FROM {
            groups.push((at, end - at));
        } else {
            groups.extend((at..end).map(|position| (position, 1)));
        }
        at = end;
    }
    groups
}

/// The stage changes as entries: each a first change and how many in a
/// row it stands for (expansions of one base whose statuses and changed
/// field names are the same).
pub fn stage_groups(changes: &[StageChange]) -> Vec<(&StageChange, usize)> {
    let names = |change: &StageChange| -> Vec<String> {
        change
            .key_changes
            .iter()
            .map(|field| field_kind(&field.field).to_string())
            .collect()
    };
    let same = |a: &StageChange, b: &StageChange| {
        a.stage.contains('@')
            && base_of(&a.stage) == base_of(&b.stage)
            && a.status_a == b.status_a
            && a.status_b == b.status_b
            && names(a) == names(b)
    };
    runs_of(changes.len(), |first, next| {
        same(&changes[first], &changes[next])
    })
    .into_iter()
    .map(|(at, count)| (&changes[at], count))
    .collect()
}

/// `deps` of `deps.data/S001.txt.digest`, `params` of `params.scale`.
fn field_kind(field: &str) -> &str {
    field.split('.').next().unwrap_or(field)
}

/// A stage's changed fields as they are listed: each kind with more than
/// [`FIELDS_LISTED`] changes is its first few, then one line counting it
/// (`deps: 600 changed; -v lists them`).
pub fn shown_fields(fields: &[FieldChange]) -> (Vec<FieldChange>, Vec<String>) {
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for field in fields {
        let kind = field_kind(&field.field);
        match kinds.iter_mut().find(|(seen, _)| *seen == kind) {
            Some((_, count)) => *count += 1,
            None => kinds.push((kind, 1)),
        }
    }
    let mut listed = Vec::new();
    let mut counted = Vec::new();
    for (kind, count) in kinds {
        let of_kind = fields
            .iter()
            .filter(|field| field_kind(&field.field) == kind);
        if count <= FIELDS_LISTED {
            listed.extend(of_kind.cloned());
        } else {
            listed.extend(of_kind.take(3).cloned());
            counted.push(format!(
                "{kind}: {count} changed, {} more not listed (-v lists them)",
                count - 3
            ));
        }
    }
    (listed, counted)
}

/// Output changes as they are listed: each alone, but those of a matrix
/// base with [`FOLDED_FROM`] or more changed, which are one entry (its
/// first change, with the base and the count).
pub fn output_groups(outputs: &[OutputChange]) -> Vec<(Option<(&str, usize)>, &OutputChange)> {
    let mut per_base: std::collections::HashMap<&str, usize> = Default::default();
    for output in outputs.iter().filter(|output| output.stage.contains('@')) {
        *per_base.entry(base_of(&output.stage)).or_default() += 1;
    }
    let mut emitted = std::collections::HashSet::new();
    let mut shown = Vec::new();
    for output in outputs {
        let base = base_of(&output.stage);
        let count = per_base.get(base).copied().unwrap_or(0);
        if output.stage.contains('@') && count >= FOLDED_FROM {
            if emitted.insert(base) {
                shown.push((Some((base, count)), output));
            }
        } else {
            shown.push((None, output));
        }
    }
    shown
}
