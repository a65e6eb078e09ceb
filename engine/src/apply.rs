//! `pipe apply RUN`: a recorded run brought back into the workspace whole,
//! as `dvc exp apply` does: its params written into the files that set
//! them (each value replaced in place, as `-S` writes `params.yaml` for a
//! run: comments, order and every other byte kept), and its outputs
//! restored, so that the pipeline, read again, is the run's and every
//! stage it ran is fresh.
//!
//! The record is not believed beyond what the cache bears out: its params
//! are values written as YAML scalars, never evaluated, and its outputs
//! are restored only as `checkout` restores them (held to the pipeline's
//! stages and to the stored results). Whether the workspace then agrees
//! with itself is the planner's to say, and the report carries its word.

use std::path::PathBuf;

use serde_json::Value;

use crate::checkout::{checkout, requested_run, CheckoutReport, CheckoutRequest, RequestedRun};
use crate::events::Observer;
use crate::exec::RunOptions;
use crate::history::Notice;
use crate::link::link_modes_for;
use crate::overrides::{OverrideMode, OverrideValue, ParamOverride, ParamPath, ParamValue};
use crate::params_override;
use crate::pipefile::{self, CatalogSource, Loaded};
use crate::pipeline::{ParamsFileEdits, Pipeline};
use crate::plan::{Freshness, Planner};
use crate::project::Project;
use crate::runs::{files_with_uncommitted_edits, RunId, RunRecord};
use crate::{EngineError, Result};

/// What `pipe apply` did, or why it did nothing.
#[derive(Debug)]
pub enum ApplyReport {
    /// The outputs could not be restored (`checkout`'s report); nothing
    /// was changed.
    NotRestored(CheckoutReport),
    /// These params of the run cannot be written where the project sets
    /// them (`path: why` each); nothing was changed.
    Unwritable(Vec<String>),
    /// These files would be rewritten but hold edits git has not
    /// committed; nothing was changed.
    UncommittedEdits(Vec<PathBuf>),
    /// The run is a sweep of several combinations and `--row` named none
    /// of them (or none was given): each combination's swept values.
    ChooseRow {
        given: Option<String>,
        rows: Vec<Vec<ParamOverride>>,
    },
    Done(Applied),
}

/// What was written and restored, and the workspace's status after.
#[derive(Debug)]
pub struct Applied {
    pub edits: Vec<AppliedEdit>,
    pub restored: usize,
    pub unchanged: usize,
    /// Stages of the pipeline, and those not fresh after (`name: state`).
    pub stages: usize,
    pub not_fresh: Vec<(String, Freshness)>,
    /// Of a sweep, whose reports showed every combination: the run that
    /// made this combination's, when one was made.
    pub reports_made: Option<RunId>,
}

/// One value replaced in a file.
#[derive(Debug, Clone)]
pub struct AppliedEdit {
    pub file: PathBuf,
    pub line: usize,
    pub param: String,
    pub before: String,
    pub after: String,
}

#[derive(Debug)]
pub struct AppliedRun {
    pub run: RunId,
    pub report: ApplyReport,
}

/// `pipe apply RUN`. Takes the run lock, resolves the run (pulling its
/// record when it is only in the remote), works out which params differ
/// from what the project's files set now and where each is written, and
/// only when every one can be written and the outputs restored, restores
/// them and writes the params.
pub fn apply_run(
    project: &Project,
    request: &CheckoutRequest,
    row: Option<&str>,
    catalogs: &dyn CatalogSource,
    notify: &mut dyn FnMut(Notice),
    report_argv: &[String],
    observer: Observer<'_>,
) -> Result<AppliedRun> {
    let RequestedRun {
        lock,
        id,
        record,
        file,
    } = requested_run(project, request, notify)?;
    let done = |report| Ok(AppliedRun { run: id, report });
    let now = pipefile::load(&file, &[], catalogs)?.pipeline;
    // A sweep is brought back one combination at a time: its values, and
    // its stages' records under the names a plain run gives them.
    let was_sweep = record.sweep;
    let (record, target) = match record.sweep {
        false => {
            let params = record.params.clone();
            (record, params)
        }
        true => match sweep_row(&record, row)? {
            Ok((overrides, record)) => {
                let params = pipefile::load(&file, &overrides, catalogs)?.pipeline.params;
                (record, params)
            }
            Err(rows) => {
                return done(ApplyReport::ChooseRow {
                    given: row.map(str::to_string),
                    rows,
                })
            }
        },
    };
    let (settings, mut unwritable_params) = differing_params(&target, &now.params);
    let Loaded { pipeline, .. } = pipefile::load(&file, &settings, catalogs)?;
    unwritable_params.extend(unwritable(&settings, &pipeline));
    let unwritable = unwritable_params;
    if !unwritable.is_empty() {
        return done(ApplyReport::Unwritable(unwritable));
    }
    let files: Vec<&ParamsFileEdits> = [&pipeline.params_file, &pipeline.pipeline_file_params]
        .into_iter()
        .flatten()
        .collect();
    let paths: Vec<PathBuf> = files.iter().map(|edits| edits.file.clone()).collect();
    if !request.force {
        let dirty = files_with_uncommitted_edits(&project.root, &paths);
        if !dirty.is_empty() {
            return done(ApplyReport::UncommittedEdits(dirty));
        }
    }
    let mut written = Vec::new();
    for edits in &files {
        params_override::check_editable(&edits.file)?;
        written.push(edited_bytes(edits)?);
    }
    let modes = link_modes_for(&pipeline, &request.link)?.value;
    // A report of a sweep showed every combination: it is not this one's,
    // and is left for `pipe run` to make.
    let mut record = record;
    let sweep_reports: Vec<String> = match was_sweep {
        false => Vec::new(),
        true => pipeline
            .stages
            .iter()
            .filter(|stage| stage.reads_run())
            .map(|stage| stage.name.clone())
            .collect(),
    };
    record
        .stages
        .retain(|stage| !sweep_reports.contains(&stage.stage));
    let (restored, unchanged) =
        match checkout(project, &lock, &record, &pipeline, &modes, request.force)? {
            CheckoutReport::Done {
                restored,
                unchanged,
            } => (restored, unchanged),
            other => return done(ApplyReport::NotRestored(other)),
        };
    let mut applied = Vec::new();
    let temp_dir = params_override::temp_dir(&project.root);
    std::fs::create_dir_all(&temp_dir).map_err(|e| EngineError::io(&temp_dir, e))?;
    params_override::sweep_temps(&temp_dir, "");
    for (edits, bytes) in files.iter().zip(written) {
        applied.extend(described(edits));
        params_override::sweep_beside(&edits.file);
        let permissions = std::fs::metadata(&edits.file)
            .ok()
            .map(|found| found.permissions());
        params_override::replace_file(&edits.file, &bytes, permissions, &temp_dir)?;
    }
    drop(lock);
    let after = pipefile::load(&file, &[], catalogs)?;
    let mut not_fresh = stages_not_fresh(&after)?;
    // What the sweep's report was for every combination, this one's is
    // made from the results now in place (it runs nothing else).
    let mut reports_made = None;
    if !not_fresh.is_empty()
        && not_fresh
            .iter()
            .all(|(stage, _)| sweep_reports.contains(stage))
    {
        let options = RunOptions {
            targets: sweep_reports.clone(),
            force: Vec::new(),
            force_all: false,
            jobs: 1,
            link: modes,
            argv: report_argv.to_vec(),
            overrides: Vec::new(),
            remote: None,
            executor: crate::executor::Executor::Local,
            sweep: false,
            git_settler: None,
            name: None,
            remove_orphans: false,
        };
        let made = crate::exec::run(&after.pipeline, &after.dag, &options, observer)?;
        reports_made = made.recorded;
        not_fresh = stages_not_fresh(&after)?;
    }
    done(ApplyReport::Done(Applied {
        edits: applied,
        restored,
        unchanged,
        stages: after.pipeline.stages.len(),
        not_fresh,
        reports_made,
    }))
}

/// Each stage of `loaded` that is not fresh, and what it is.
fn stages_not_fresh(loaded: &Loaded) -> Result<Vec<(String, Freshness)>> {
    let planner = Planner::new(&loaded.pipeline)?;
    let states = planner.states(&loaded.dag, &loaded.dag.order)?;
    Ok(states
        .into_iter()
        .filter(|state| state.freshness != Freshness::Fresh)
        .map(|state| (state.stage, state.freshness))
        .collect())
}

/// `-S` settings that make `now` the run's `recorded` params: one per
/// value that differs, the recorded value as data; and the params that no setting can reach (a
/// param the project no longer sets, a key holding `.` or `=`), each as
/// `path: why`.
fn differing_params(recorded: &Value, now: &Value) -> (Vec<ParamOverride>, Vec<String>) {
    fn walk(
        path: &str,
        recorded: &Value,
        now: &Value,
        settings: &mut Vec<ParamOverride>,
        unreachable: &mut Vec<String>,
    ) {
        match (recorded, now) {
            (Value::Object(fields), Value::Object(now_fields)) => {
                for (key, value) in fields {
                    let path = match path {
                        "" => key.clone(),
                        _ => format!("{path}.{key}"),
                    };
                    match now_fields.get(key) {
                        _ if key.contains(['.', '=']) || key.starts_with('+') => unreachable
                            .push(format!("{path}: a key with `.`, `=` or a leading `+` cannot be set by path; set it by hand")),
                        Some(now) => walk(&path, value, now, settings, unreachable),
                        None => unreachable.push(format!(
                            "{path} = {}: the run had this param, which the project's files no longer set; add it by hand",
                            serde_json::to_string(value).unwrap_or_default()
                        )),
                    }
                }
            }
            (recorded, now) if recorded == now => {}
            (recorded, _) => {
                // Keys with `.` were refused above, so the path splits
                // back into them.
                let keys = path.split('.').map(str::to_string).collect();
                if let Some(path) = ParamPath::new(keys) {
                    settings.push(ParamOverride {
                        path,
                        mode: OverrideMode::Replace,
                        value: OverrideValue::One(ParamValue::from_json(recorded)),
                    });
                }
            }
        }
    }
    let (mut settings, mut unreachable) = (Vec::new(), Vec::new());
    walk("", recorded, now, &mut settings, &mut unreachable);
    (settings, unreachable)
}

/// The settings no file can take in place: one written over several
/// lines, as a mapping, or under an anchor or alias (an edit would change
/// the params that share it), or one only `-S` set.
fn unwritable(settings: &[ParamOverride], pipeline: &Pipeline) -> Vec<String> {
    let edited = |path: &str| {
        [&pipeline.params_file, &pipeline.pipeline_file_params]
            .into_iter()
            .flatten()
            .any(|edits| edits.edits.iter().any(|edit| edit.path == path))
    };
    settings
        .iter()
        .filter_map(|setting| {
            let (path, value) = (setting.path.dotted(), setting.values_shown());
            (!edited(&path)).then(|| {
                format!("{path} = {value}: the project writes it over several lines, as a mapping, or under a YAML anchor or alias that other params share, and pipe replaces only one-line values of one param in place; set it by hand")
            })
        })
        .collect()
}

/// The file of `edits` with them made, checked to be the text they were
/// found in (a byte order mark kept, as a run's `-S` write keeps it).
fn edited_bytes(edits: &ParamsFileEdits) -> Result<Vec<u8>> {
    let bytes = std::fs::read(&edits.file).map_err(|e| EngineError::io(&edits.file, e))?;
    params_override::edited(edits, &bytes).ok_or_else(|| {
        EngineError::Internal(format!(
            "{} changed while pipe apply read it; run it again",
            edits.file.display()
        ))
    })
}

/// Each edit with the text it replaced.
fn described(edits: &ParamsFileEdits) -> Vec<AppliedEdit> {
    let old = std::fs::read_to_string(&edits.file).unwrap_or_default();
    let old = old.strip_prefix('\u{feff}').unwrap_or(&old);
    edits
        .edits
        .iter()
        .map(|edit| AppliedEdit {
            file: edits.file.clone(),
            line: edit.line,
            param: edit.path.clone(),
            before: old
                .lines()
                .nth(edit.line - 1)
                .map(|line| line.chars().skip(edit.col - 1).take(edit.len).collect())
                .unwrap_or_default(),
            after: edit.text.clone(),
        })
        .collect()
}

/// A sweep's combination, its `-S` settings and its stages' record; or
/// every combination's swept values, when none was named.
type RowChoice = std::result::Result<(Vec<ParamOverride>, RunRecord), Vec<Vec<ParamOverride>>>;

/// The combination of sweep `record` that `row` names (`n_est=20,depth=4`:
/// each swept param by its path or the last segments of it, every swept
/// param named): its `-S` settings, and the record of its stages alone,
/// named as in a run of that combination. `Err`: every combination's
/// swept values, when `row` names none of them.
fn sweep_row(record: &RunRecord, row: Option<&str>) -> Result<RowChoice> {
    let combinations = crate::sweep::combinations(&record.overrides)?;
    let rows: Vec<Vec<ParamOverride>> = combinations
        .iter()
        .map(|(_, swept)| swept.clone())
        .collect();
    let Some(row) = row else {
        return Ok(Err(rows));
    };
    let wanted: Vec<(&str, &str)> = row
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.trim(), value.trim()))
        .collect();
    let names = |key: &str, path: &str| {
        key == path || path.ends_with(&format!(".{key}")) || key == format!("params.{path}")
    };
    let chosen = combinations.iter().find(|(_, swept)| {
        swept.len() == wanted.len()
            && swept.iter().all(|setting| {
                let (path, value) = (setting.path.dotted(), setting.values_shown());
                wanted
                    .iter()
                    .filter(|(key, _)| names(key, &path))
                    .map(|(_, wanted)| *wanted)
                    .eq([value.as_str()])
            })
    });
    let Some((overrides, swept)) = chosen else {
        return Ok(Err(rows));
    };
    let swept: Vec<(String, String)> = swept
        .iter()
        .map(|setting| (setting.path.dotted(), setting.values_shown()))
        .collect();
    let mut chosen_record = record.clone();
    chosen_record.sweep = false;
    chosen_record.overrides = overrides.clone();
    chosen_record.stages = record
        .stages
        .iter()
        .filter_map(|stage| {
            let (base, pairs) = match stage.stage.split_once('@') {
                Some((base, pairs)) => (base, pairs),
                None => return Some(stage.clone()),
            };
            let mut kept = Vec::new();
            for pair in pairs.split(',') {
                let (key, value) = pair.split_once('=')?;
                match swept.iter().find(|(path, _)| names(key, path)) {
                    Some((_, swept_value)) if *swept_value != value => return None,
                    Some(_) => {}
                    None => kept.push(pair),
                }
            }
            let mut stage = stage.clone();
            stage.stage = match kept.is_empty() {
                true => base.to_string(),
                false => format!("{base}@{}", kept.join(",")),
            };
            Some(stage)
        })
        .collect();
    Ok(Ok((overrides.clone(), chosen_record)))
}
