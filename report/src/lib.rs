//! Reports for pipe, drawn from plain data: SVG plots ([`chart`]: line,
//! scatter and step charts with named series, grouped bar charts, heat
//! maps, small charts of a param against a metric), the plots a stage
//! declares of its files ([`plot`]: CSV, TSV and JSON data read within
//! limits, drawn as declared), tables, and a
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
pub mod plot;
pub mod text;

pub use chart::params::{ParamChart, ParamPoint};
pub use chart::{BarChart, HeatMap, LineChart, Series, Shape};
pub use document::{Better, Block, Cell, Change, Document, Explore, Plot, Table, Tone};
pub use error::{ReportError, Result};
