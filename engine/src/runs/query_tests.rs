//! Every way of reading runs gives them whole: the one reader's promise.

use std::collections::BTreeMap;

use serde_json::json;

use super::RunSelection;
use crate::runs::{RunDb, RunEnd, RunId, RunRecord, RunStart, RunStatus, StageRecord, StageStatus};

fn record_run(db: &mut RunDb, pipeline: &str, started_ms: u64, stages: &[&str]) -> RunId {
    let params = json!({"lr": 0.1});
    let directions = BTreeMap::new();
    let id = db
        .start_run(&RunStart {
            pipeline,
            file: Some("pipe.yaml"),
            argv: &["pipe".to_string(), "run".to_string()],
            overrides: &[],
            sweep: false,
            params: &params,
            directions: &directions,
            git_commit: None,
            name: None,
            branch: None,
            head_commit: None,
            started_ms,
        })
        .unwrap();
    let records: Vec<(StageRecord, Option<&serde_json::Value>)> = stages
        .iter()
        .enumerate()
        .map(|(position, name)| {
            let mut identity = crate::runs::legacy_identity(name, None);
            // Recorded in the reverse of the pipeline's order, as stages
            // that finish out of order are.
            identity.position = stages.len() - position;
            (StageRecord::new(name, identity, StageStatus::Ran), None)
        })
        .collect();
    db.record_stages(id, &records).unwrap();
    db.finish_run(
        id,
        &RunEnd {
            status: RunStatus::Succeeded,
            git_dirty: None,
        },
    )
    .unwrap();
    id
}

fn stage_names(run: &RunRecord) -> Vec<&str> {
    run.stages
        .iter()
        .map(|stage| stage.stage.as_str())
        .collect()
}

#[test]
fn every_reader_gives_each_run_with_all_its_stages_in_recorded_order() {
    let directory = tempfile::tempdir().unwrap();
    let mut db = RunDb::open(&directory.path().join("runs.db")).unwrap();
    let first = record_run(&mut db, "p", 1, &["prepare", "train"]);
    let second = record_run(&mut db, "q", 2, &["prepare", "train", "evaluate"]);
    let empty = record_run(&mut db, "p", 3, &[]);

    let one = db.run(second).unwrap().unwrap();
    assert_eq!(stage_names(&one), ["prepare", "train", "evaluate"]);
    assert!(db.run(RunId(99)).unwrap().is_none());

    let newest = db.newest_runs(RunSelection::default(), 2).unwrap();
    let ids: Vec<RunId> = newest.iter().map(|run| run.id).collect();
    assert_eq!(ids, [empty, second]);
    assert_eq!(stage_names(&newest[1]), ["prepare", "train", "evaluate"]);
    assert!(newest[0].stages.is_empty());

    let succeeded = db.succeeded_runs(Some("p"), 10).unwrap();
    let ids: Vec<RunId> = succeeded.iter().map(|run| run.id).collect();
    assert_eq!(ids, [empty, first]);
    assert_eq!(stage_names(&succeeded[1]), ["prepare", "train"]);

    let all = db.runs(&RunSelection::default()).unwrap();
    let whole: Vec<(RunId, usize)> = all.iter().map(|run| (run.id, run.stages.len())).collect();
    assert_eq!(whole, [(first, 2), (second, 3), (empty, 0)]);
}
