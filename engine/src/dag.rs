//! The stage graph: edges come from dependencies on other stages' outputs.

use crate::spec::Pipeline;
use crate::Result;

/// Stages are indexed as in `Pipeline::stages`.
#[derive(Debug, Clone)]
pub struct Dag {
    /// For each stage, the stages it depends on (deduplicated, sorted).
    pub upstream: Vec<Vec<usize>>,
    /// For each stage, the stages that depend on it.
    pub downstream: Vec<Vec<usize>>,
    /// A topological order (dependencies first; ties in declaration order).
    pub order: Vec<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DagFormat {
    Ascii,
    Dot,
    Mermaid,
}

impl Dag {
    /// Fails with a located `cycle` diagnostic naming the stages on a cycle.
    pub fn build(pipeline: &Pipeline) -> Result<Dag> {
        let _ = pipeline;
        todo!()
    }

    /// Indices of `targets` and everything they depend on, in topological order.
    pub fn closure(&self, targets: &[usize]) -> Vec<usize> {
        let _ = targets;
        todo!()
    }

    pub fn render(&self, pipeline: &Pipeline, format: DagFormat) -> String {
        let _ = (pipeline, format);
        todo!()
    }
}
