//! The plots the run's stages declare of their own files (`plots:`),
//! drawn from the files as the stages left them: the engine keys the
//! report on their digests, so a changed file makes a new report.

use std::io::Read;

use pipe_protocol::{RunContext, RunPlot};
use pipe_report::plot::{draw, DataTable, PlotRun, MAX_PLOT_BYTES};
use pipe_report::Document;

use crate::{Result, StageError};

const HINT: &str = "fix the stage that writes the file, or the plot's `x`, `y` or `kind` in the \
                    pipeline's `plots:` (docs/pipeline-spec.md, \"Plots\")";

/// A section per stage that declares plots, one plot each (a confusion
/// matrix with its counts as a table for the pasteable Markdown).
pub(super) fn declared_plots(document: &mut Document, run: &RunContext) -> Result<()> {
    for stage in run.stages.iter().filter(|stage| !stage.plots.is_empty()) {
        document.heading(2, format!("Plots: {}", stage.name));
        for plot in &stage.plots {
            let data = read(plot)?;
            let runs = [PlotRun {
                name: stage.name.clone(),
                key: None,
                data: &data,
            }];
            let figures = draw(&plot.spec, &runs)
                .map_err(|error| StageError::input(error.to_string(), HINT))?;
            for figure in figures {
                document.plot_with_table(
                    &format!("{}-{}", stage.name, plot.spec.path),
                    figure.title,
                    figure.svg,
                    figure.table,
                );
            }
        }
    }
    Ok(())
}

/// The plot's file, refused unread past [`MAX_PLOT_BYTES`]: it is what a
/// command wrote, so any size.
fn read(plot: &RunPlot) -> Result<DataTable> {
    let path = &plot.file;
    // Not a FIFO or a device, whose open or read would never end.
    let metadata = std::fs::metadata(path).map_err(|e| StageError::io(path, e))?;
    if !metadata.is_file() {
        return Err(StageError::input(
            format!("plot file `{}` is not a regular file", plot.spec.path),
            HINT,
        ));
    }
    let file = std::fs::File::open(path).map_err(|e| StageError::io(path, e))?;
    let mut bytes = Vec::new();
    file.take(MAX_PLOT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| StageError::io(path, e))?;
    DataTable::read(&plot.spec.path, &bytes)
        .map_err(|error| StageError::input(error.to_string(), HINT))
}
