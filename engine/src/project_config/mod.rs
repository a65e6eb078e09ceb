//! The project's settings file, `pipe.config.yaml`: what every pipeline of
//! the project shares, written in the `cache:` and `executor:` sections a
//! pipeline file also holds. The loader (`pipefile/`) parses a pipeline's
//! own sections with the parsers here; the settings resolvers (`executor`,
//! `remote`, `link`) read the project's file through `load_project_config`.

pub(crate) mod cache_section;
pub(crate) mod executor_section;
mod read;

pub(crate) use read::{load_project_config, read_cache_section};
