//! The files of a project, below everything that reads one: the names pipe
//! finds them by, project-relative paths and where they really lie once
//! symlinks are followed (with the checks that keep pipe from writing an
//! output outside the project or into `.git/` and `.pipe/`), and YAML read
//! with the place of every node, the texts those places point into and the
//! diagnostics gathered on the way. A leaf layer: it imports only
//! `diagnostic`, so the loader (`pipefile/`), the settings files
//! (`project_config/`), `dvc_import/`, the runs and the workspace all build
//! on it.

pub(crate) mod collect;
mod names;
pub(crate) mod paths;
pub(crate) mod source;
pub(crate) mod yaml;
mod yaml_events;
pub(crate) mod yaml_text;

pub use names::PROJECT_CONFIG_FILE;
pub use paths::{ProjectPath, UnsafeOutput};
