//! The libtorch stages, run by `pipe-stage-train`.

mod classifier;
mod eval;
mod train;

use pipe_stages::BuiltinStage;

/// The training stages, in the order `pipe stages` lists them.
pub fn training_stages() -> Vec<&'static dyn BuiltinStage> {
    vec![&train::TrainClassifier, &eval::EvalClassifier]
}
