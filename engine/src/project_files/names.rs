//! The files of a project that pipe finds by name.

/// The project's settings file, beside `.pipe/`: what every pipeline of
/// the project shares (a pipeline's own `cache:` and `executor:` win).
pub const PROJECT_CONFIG_FILE: &str = "pipe.config.yaml";
