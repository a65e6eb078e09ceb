//! Which devices the replicas train on, and how messages name them.

use std::collections::HashSet;

use tch::Device;

use pipe_stages::{Result, StageContext, StageError};

use super::super::classifier::device;
use super::params::{Strategy, TrainParams};
use crate::hardware;

/// The devices of the replicas, rank order: one under `single` (the
/// engine's GPU, else the CPU); under `ddp`, the engine's GPUs, which must
/// number `devices`, or `devices` CPU replicas when it gave none.
pub(super) fn replica_devices(
    context: &StageContext,
    settings: &TrainParams,
) -> Result<Vec<Device>> {
    if settings.strategy == Strategy::Single {
        return Ok(vec![device(context)?]);
    }
    let wanted = settings.devices;
    let given = &context.invocation.devices;
    if given.is_empty() {
        return Ok(vec![Device::Cpu; wanted]);
    }
    if given.len() != wanted {
        return Err(StageError::param(
            "devices",
            format!(
                "is {wanted}, but the stage was given {} GPU{} ({})",
                given.len(),
                if given.len() == 1 { "" } else { "s" },
                given.join(", ")
            ),
            format!("set the stage's `resources.gpus` and `devices` to the same number ({wanted} or {})", given.len()),
        ));
    }
    if !tch::Cuda::is_available() {
        return Err(StageError::input(
            format!(
                "the stage was given GPUs {} but libtorch sees no CUDA device: {}",
                given.join(", "),
                hardware::why_no_cuda()
            ),
            "check the NVIDIA driver (nvidia-smi) and that the worker was built against a CUDA libtorch; \
             or drop `resources.gpus` to train CPU replicas",
        ));
    }
    let visible = usize::try_from(tch::Cuda::device_count()).unwrap_or(0);
    let distinct_given = given.iter().collect::<HashSet<_>>().len();
    if visible < distinct_given {
        return Err(StageError::param(
            "devices",
            format!("is {wanted}, but libtorch sees only {visible} CUDA device(s)"),
            format!("use `devices: {visible}` (and `resources.gpus: {visible}`), or check CUDA_VISIBLE_DEVICES"),
        ));
    }
    // The engine sets CUDA_VISIBLE_DEVICES to the GPUs it gave, so they
    // are cuda:0..N-1 here whatever their numbers on the machine. A GPU
    // named twice (the tests and scripts/gpu-check.sh do it; the engine
    // never does) puts two replicas on it.
    let mut distinct: Vec<&String> = Vec::new();
    let mut indices = Vec::with_capacity(wanted);
    for gpu in given {
        let index = match distinct.iter().position(|seen| *seen == gpu) {
            Some(index) => index,
            None => {
                distinct.push(gpu);
                distinct.len() - 1
            }
        };
        indices.push(index);
    }
    Ok(indices.into_iter().map(Device::Cuda).collect())
}

pub(super) fn device_name(device: Device) -> String {
    match device {
        Device::Cuda(index) => format!("cuda:{index}"),
        Device::Mps => "mps".to_string(),
        Device::Vulkan => "vulkan".to_string(),
        Device::Cpu => "cpu".to_string(),
    }
}

pub(super) fn describe_devices(strategy: Strategy, devices: &[Device]) -> String {
    match (strategy, devices) {
        (Strategy::Single, [device]) => device_name(*device),
        _ if devices.iter().all(|device| *device == Device::Cpu) => format!(
            "{} over {} CPU replicas (one process each; give the stage GPUs with `resources.gpus`)",
            strategy.name(),
            devices.len()
        ),
        _ => format!(
            "{} over {}",
            strategy.name(),
            devices
                .iter()
                .map(|device| device_name(*device))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
