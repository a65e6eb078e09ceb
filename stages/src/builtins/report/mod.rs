//! `report/html@1`: the results of the pipeline as one self-contained HTML
//! page and two Markdown files, one to paste (text and tables) and one
//! with the plots as images: the results table (one row per matrix
//! combination), params, stage times, training curves, throughput,
//! hardware and confusion matrices, and the plots the stages declare of
//! their files (`plots:`). Drawing and page layout are
//! `pipe-report`'s; this module only decides what the run shows.
//!
//! Everything shown comes from the `RunContext` and the files it names,
//! never from a clock, this machine or the run (its id, time, commit, which
//! stages were restored): the engine keys the report on exactly that
//! context, so the same results give the same bytes, and an unchanged
//! pipeline restores its report instead of making it again.

mod html_report;
mod model;
mod plots;
mod results;
mod sections;

pub(crate) use html_report::HtmlReport;
