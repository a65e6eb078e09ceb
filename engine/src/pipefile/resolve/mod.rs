//! Phase 3: every expansion resolved: `${...}` interpolated (quoted for its
//! context), paths normalised, references to other stages' outputs turned
//! into dependencies, `env`, `resources` and the params a stage uses.

mod env;
mod interpolate;
mod output_options;
mod outputs;
mod plots;
mod references;
mod resolver;
mod resources;

pub(super) use resolver::{Effects, Resolver};
