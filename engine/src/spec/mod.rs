//! Pipeline files, in one pass: YAML (with positions) -> params -> stage
//! declarations -> the catalog of the workers they use -> matrix expansion
//! -> interpolation, `with:` checked against the catalog, outputs placed ->
//! symlinks followed, output ownership and implicit edges -> the DAG. The
//! result is a [`Pipeline`] that nothing downstream re-reads or corrects.
//! The format is specified in docs/pipeline-spec.md.

use std::path::Path;

use crate::catalog::{self, Catalog};
use crate::dag::Dag;
use crate::pipeline::Pipeline;
use crate::project::Project;
use crate::Result;

pub(crate) mod cache_section;
mod executor_section;
pub use cache_section::{pipeline_remote, PROJECT_CONFIG_FILE};
pub use load::pipeline_file_problem;
pub use name::pipeline_name;
pub use params::override_value;
pub use paths::UnsafeOutput;
pub use suggest::did_you_mean;
mod collect;
mod declare;
mod expand;
mod interp;
mod load;
mod name;
mod ownership;
mod params;
pub(crate) mod paths;
mod resolve;
mod shell;
mod source;
mod stages;
pub(crate) mod suggest;
mod worker_stage;
mod yaml;

/// A pipeline and its DAG, built once.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub pipeline: Pipeline,
    pub dag: Dag,
}

/// Where the catalog of `uses:` stages comes from.
pub trait CatalogSource {
    /// The catalog for a project at `root` whose stages use `uses`
    /// (`name`, major version). Asked at most once per load, and only when
    /// the file has `uses:` stages and no other error.
    fn catalog(&self, root: &Path, uses: &[(&str, u32)]) -> Result<Catalog>;
}

/// The workers of the project: the built-in `pipe-stage` and
/// `pipe-stage-train` (their stages known without starting or building
/// them) and third-party `pipe-stage-*` workers (`catalog::load_catalog`).
pub struct ProjectWorkers;

impl CatalogSource for ProjectWorkers {
    fn catalog(&self, root: &Path, _uses: &[(&str, u32)]) -> Result<Catalog> {
        catalog::load_catalog(&Project::open(root)?)
    }
}

/// A fixed catalog (tests, tools that describe workers themselves).
impl CatalogSource for Catalog {
    fn catalog(&self, _root: &Path, _uses: &[(&str, u32)]) -> Result<Catalog> {
        Ok(self.clone())
    }
}

/// Reads, validates, expands and resolves the pipeline at `file`.
/// `overrides` are the `-S key.path=value` arguments, in order. Every
/// problem found is reported at once as `EngineError::Spec`, located in the
/// file.
pub fn load(file: &Path, overrides: &[String], catalogs: &dyn CatalogSource) -> Result<Loaded> {
    load::load(file, overrides, catalogs)
}
