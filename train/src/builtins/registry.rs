//! The list of the worker's stages, in the order `pipe stages` shows them.

use pipe_stages::BuiltinStage;

/// The training stages, in the order `pipe stages` lists them.
pub fn training_stages() -> Vec<&'static dyn BuiltinStage> {
    vec![&super::train::TrainClassifier, &super::eval::EvalClassifier]
}
