//! No code: this crate's manifest gives the dependencies that `pipe` and
//! its workers share one feature set, so that building the workers after
//! `pipe` compiles none of them again (see Cargo.toml).
