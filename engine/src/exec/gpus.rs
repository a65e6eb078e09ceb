//! Which GPUs this machine has, for `resources.gpus`.

/// GPU ids to hand out, each what a stage's `CUDA_VISIBLE_DEVICES` names
/// it by: `PIPE_GPUS` (comma-separated, may be empty), else the GPUs
/// nvidia-smi lists within an inherited `CUDA_VISIBLE_DEVICES`
/// (`pipe_protocol::gpus`), else none.
pub fn available_gpus() -> Vec<String> {
    if let Ok(list) = std::env::var("PIPE_GPUS") {
        return list
            .split(',')
            .map(str::trim)
            .filter(|gpu| !gpu.is_empty())
            .map(String::from)
            .collect();
    }
    match pipe_protocol::gpus::visible_gpus() {
        Ok(gpus) => gpus.into_iter().map(|gpu| gpu.id).collect(),
        // No nvidia-smi is a machine without GPUs; anything else is worth
        // a line, since stages that need a GPU will then wait for none.
        Err(pipe_protocol::gpus::GpuError::Spawn(_)) => Vec::new(),
        Err(error) => {
            tracing::warn!("no GPUs: {error}");
            Vec::new()
        }
    }
}
