//! How results are restored into the workspace: which link modes, from
//! which source.

use std::path::Path;

use pipe_cache::LinkMode;

use crate::diagnostic::Location;
use crate::pipeline::Pipeline;
use crate::project_config::load_project_config;
use crate::settings::{parse_link_modes, Setting, Source, Sourced};
use crate::Result;

/// The link modes a restore tries, in order, for the project at `root`:
/// `--link`, `PIPE_LINK`, the pipeline's `cache.link`, pipe.config.yaml's,
/// else `LinkMode::DEFAULT_ORDER`.
pub fn link_modes(
    root: &Path,
    flag: Option<&str>,
    pipeline: Option<(&[LinkMode], Option<&Location>)>,
) -> Result<Sourced<Vec<LinkMode>>> {
    let project = load_project_config(root)?;
    let (pipeline, pipeline_at) = pipeline.map_or((None, None), |(modes, at)| (Some(modes), at));
    let chosen = Setting::new("the link modes")
        .flag_text("--link", flag, parse_link_modes)
        .env("PIPE_LINK", parse_link_modes)
        .pipeline(pipeline.map(<[LinkMode]>::to_vec), pipeline_at)
        .project(project.link, project.link_at.as_ref())
        .resolve()?;
    Ok(chosen.unwrap_or_else(|| Sourced {
        value: LinkMode::DEFAULT_ORDER.to_vec(),
        source: Source::Default,
    }))
}

/// The link modes of a run or checkout of `pipeline`, `--link` given as
/// its values (each may hold a comma-separated list).
pub fn link_modes_for(pipeline: &Pipeline, flags: &[String]) -> Result<Sourced<Vec<LinkMode>>> {
    let flag = (!flags.is_empty()).then(|| flags.join(","));
    let declared = pipeline
        .link
        .as_deref()
        .map(|modes| (modes, pipeline.link_at.as_ref()));
    link_modes(&pipeline.root, flag.as_deref(), declared)
}
