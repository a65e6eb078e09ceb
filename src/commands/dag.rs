//! `pipe dag`: the DAG as ascii, dot or mermaid.

use std::path::Path;

use pipe_engine::{DagFormat, ExitCode, Result};

use crate::cli::{DagFormatArg, PipelineArg};
use crate::output::out;
use crate::run_setup::load;

pub(super) fn dag(
    path: Option<&Path>,
    pipeline: &PipelineArg,
    format: DagFormatArg,
) -> Result<ExitCode> {
    let (pipeline, dag) = load(path, pipeline)?;
    let format = match format {
        DagFormatArg::Ascii if !crate::human_reporter::every_stage() => {
            out!("{}", ensure_newline(dag.render_by_matrix(&pipeline)));
            return Ok(ExitCode::Ok);
        }
        DagFormatArg::Ascii => DagFormat::Ascii,
        DagFormatArg::Dot => DagFormat::Dot,
        DagFormatArg::Mermaid => DagFormat::Mermaid,
    };
    out!("{}", ensure_newline(dag.render(&pipeline, format)));
    Ok(ExitCode::Ok)
}

pub(super) fn ensure_newline(mut text: String) -> String {
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}
