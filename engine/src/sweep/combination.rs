//! One combination of a sweep.

use crate::pipefile::Loaded;

/// One combination: its `-S` arguments, and the pipeline they load.
pub struct Combination {
    pub overrides: Vec<String>,
    /// The swept values alone, as `-S` writes them (`train.lr=1e-4`).
    pub swept: Vec<String>,
    pub loaded: Loaded,
}
