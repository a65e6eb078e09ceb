//! `pipe init --from-dvc`: a DVC project's `dvc.yaml` read and written as
//! a `pipe.yaml` that runs the same commands on the same files, with each
//! thing pipe cannot carry listed at its place in `dvc.yaml`
//! (docs/coming-from-dvc.md). DVC's own rules are followed where they
//! decide what a command runs: its `${...}` grammar and escapes, how it
//! prints a value (Python's `str`), how it unpacks a mapping into
//! `--key value` arguments, and how `foreach` and `matrix` name stages.
//!
//! `convert` reads and converts, writing nothing; `init_from_dvc` is the
//! use case behind the command: it writes `pipe.yaml` and `.gitignore`
//! lines, then loads the file with pipe's own loader.

mod convert;
mod emit;
mod init;
mod iterate;
mod python_text;
mod read;
mod report;
mod stage;
mod template;
mod top;
mod vars;

pub use convert::convert;
pub use init::{init_from_dvc, FromDvc, Written};
pub use report::FindingKind;
