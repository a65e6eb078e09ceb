//! The integration tests of `pipe-engine`, linked into one binary: pipeline
//! files that load (`spec_valid`), that are refused with a located message
//! (`spec_malformed`), and generated ones that must never panic
//! (`spec_fuzz`).

mod spec_fuzz;
mod spec_malformed;
mod spec_valid;
