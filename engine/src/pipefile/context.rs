//! What every phase of building a pipeline's stages reads.

use std::path::Path;

use super::catalog_source::CatalogSource;
use super::override_sites::UnseenOverride;
use crate::project_files::source::FileId;
use crate::project_files::source::Sources;
use crate::project_files::yaml::Node;

/// What every phase of building the stages reads.
pub(crate) struct Context<'a> {
    pub sources: &'a Sources,
    /// The merged params.
    pub params: &'a Node,
    /// The project root, absolute.
    pub root: &'a Path,
    /// The pipeline's name: its namespace under `.pipe/out/`.
    pub pipeline: &'a str,
    pub catalogs: &'a dyn CatalogSource,
    /// The top-level `resources:`: every stage's, under its own.
    pub default_resources: Option<&'a Node>,
    /// `-S` overrides that a command reading `params.yaml` would not see.
    pub unseen_overrides: &'a [UnseenOverride],
    /// `params.yaml`'s place among the sources, when there is one.
    pub params_file: Option<FileId>,
}
