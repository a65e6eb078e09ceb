//! Reports for pipe, drawn from plain data: SVG plots ([`chart`]: line
//! charts with named series, grouped bar charts, heat maps), tables, and a
//! [`Document`] that renders as one self-contained HTML page, as Markdown
//! that can be pasted anywhere (text and tables only), and as Markdown
//! that links the same plots as SVG files beside it.
//!
//! Nothing here reads a clock, the machine or the network: the same data
//! gives byte-identical output, which is what lets reports be snapshotted
//! and compared. Every text a user could have written (a param, a stage
//! name) is escaped for the format it lands in ([`text`]).

pub mod chart;
mod document;
mod error;
pub mod text;

pub use chart::{BarChart, HeatMap, LineChart, Series};
pub use document::{Block, Cell, Document, Explore, Plot, Table};
pub use error::{ReportError, Result};
