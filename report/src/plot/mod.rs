//! The plots a stage declares of its own files (`plots:`): their data
//! read from the files' bytes ([`DataTable`]) and drawn as a spec says
//! ([`draw`]), for one run or overlaid across runs.

mod data;
mod draw;

pub use data::{DataTable, Datum, MAX_PLOT_BYTES, MAX_PLOT_CELLS, MAX_PLOT_COLUMNS, MAX_PLOT_ROWS};
pub use draw::{columns, draw, Columns, Figure, PlotRun, MAX_CONFUSION_LABELS, MAX_DRAWN_POINTS};

#[cfg(test)]
mod tests;
