//! One combination of a sweep.

use crate::overrides::ParamOverride;
use crate::pipefile::Loaded;

/// One combination: its `-S` settings, and the pipeline they load.
pub struct Combination {
    pub overrides: Vec<ParamOverride>,
    /// The swept settings alone, each with its one value here.
    pub swept: Vec<ParamOverride>,
    pub loaded: Loaded,
}

impl Combination {
    /// The swept values as `-S` writes them (`train.lr=1e-4`).
    pub fn swept_shown(&self) -> Vec<String> {
        self.swept.iter().map(ToString::to_string).collect()
    }
}
