//! Pipeline files, in one pass: YAML (with positions) -> params -> stage
//! declarations -> the catalog of the workers they use -> matrix expansion
//! -> interpolation, `with:` checked against the catalog, outputs placed ->
//! symlinks followed, output ownership and implicit edges -> the DAG. The
//! result is a [`Pipeline`] that nothing downstream re-reads or corrects.
//! The format is specified in docs/pipeline-spec.md.

pub use catalog_source::{CatalogSource, ProjectWorkers};
pub(crate) use declare::stage_keys;
pub use file::{pipeline_file_problem, pipeline_remote, with_extension};
pub use inputs::check_inputs;
pub(crate) use load::read_source;
pub use load::{load, Loaded};
pub use name::pipeline_name;
pub(crate) use plain::is_plain_value;
#[doc(hidden)]
pub use yaml_reading::{read_yaml, YamlReading};
mod catalog_source;
mod context;
mod declare;
mod expand;
mod file;
mod inputs;
mod interp;
mod load;
mod matrix_files;
mod matrix_records;
mod name;
mod override_sites;
mod ownership;
mod params;
mod plain;
mod resolve;
mod stages;
mod uses;
mod worker_stage;
mod yaml11;
mod yaml_reading;
#[cfg(test)]
mod yaml_tests;
