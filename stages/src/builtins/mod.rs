//! The registry of the data stages.

mod csv;
mod download;
mod hf;
mod imdb;
mod registry;
mod report;
mod split;
mod tokenize;

pub use registry::data_stages;
