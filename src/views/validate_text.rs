//! What `pipe validate` says of a pipeline that loads and checks.

use pipe_engine::Pipeline;

pub fn valid(pipeline: &Pipeline) -> String {
    format!(
        "`{}` is valid: {} stages\n",
        pipeline.file.display(),
        pipeline.stages.len()
    )
}
