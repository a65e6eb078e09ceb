//! The run as far as it has gone, for the stages that read it
//! (`StageInfo::reads_run`): each one is told, and keyed on, the results of
//! the stages it depends on (crate::run_input).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use pipe_protocol::{RunContext, RunStage};
use serde_json::{Map, Value};

use crate::dag::Dag;
use crate::pipeline::Pipeline;
use crate::run_input;

pub(super) struct RunSoFar {
    /// For each reader of the run: the stages it depends on, however
    /// indirectly, in the pipeline's order. That, not whatever happened to
    /// finish before it, is what it reads, so `pipe status` can work out
    /// its key without running anything.
    upstream: HashMap<usize, Vec<usize>>,
    /// The stages finished so far with a result, by index: what the reader
    /// is told, and its key's part.
    finished: Mutex<BTreeMap<usize, (RunStage, Value)>>,
}

impl RunSoFar {
    /// `None` when no selected stage reads the run, so that other runs
    /// collect nothing.
    pub(super) fn of(pipeline: &Pipeline, dag: &Dag, selected: &[usize]) -> Option<RunSoFar> {
        let upstream: HashMap<usize, Vec<usize>> = selected
            .iter()
            .filter(|&&index| pipeline.stages[index].reads_run())
            .map(|&reader| {
                let mut stages = dag.closure(&[reader]);
                stages.retain(|&index| index != reader);
                (reader, stages)
            })
            .collect();
        (!upstream.is_empty()).then(|| RunSoFar {
            upstream,
            finished: Mutex::new(BTreeMap::new()),
        })
    }

    /// Stage `index` finished with a result.
    pub(super) fn finished(&self, index: usize, stage: RunStage, keyed: Value) {
        self.finished
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(index, (stage, keyed));
    }

    /// What `reader` is told, and the `run` field of its key's manifest.
    pub(super) fn input_of(&self, pipeline: &Pipeline, reader: usize) -> (RunContext, Value) {
        let finished = self
            .finished
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut stages = Vec::new();
        let mut keyed = Map::new();
        for index in self.upstream.get(&reader).into_iter().flatten() {
            if let Some((stage, value)) = finished.get(index) {
                keyed.insert(stage.name.clone(), value.clone());
                stages.push(stage.clone());
            }
        }
        (
            run_input::context(pipeline, stages),
            run_input::keyed_run(pipeline, keyed),
        )
    }
}
