//! Where the catalog of a pipeline's `uses:` stages comes from.

use std::path::Path;

use crate::catalog::{self, Catalog};
use crate::project::Project;
use crate::Result;

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
