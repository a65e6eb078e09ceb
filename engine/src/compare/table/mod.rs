//! `pipe compare`: runs side by side as one table, one row per run and
//! matrix combination, rows that differ only in their seed grouped into
//! mean ± std, deltas against a baseline, and warnings when rows are not
//! comparable (other data, hardware or precision).
//!
//! The table is a plain serde model (`CompareTable`): the CLI renders it as
//! text, Markdown, CSV and JSON, and an HTML renderer can take it as is.

mod build;
mod columns;
mod model;
mod warnings;

pub use build::compare_runs;
pub use columns::row_label;
pub use model::{Cell, Column, ColumnKind, CompareOptions, CompareTable, Group, Pairs, Row};
