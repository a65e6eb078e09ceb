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

/// Every replica's device, rank order, over all `nodes` (each node's
/// replicas are on the same devices of their own machine).
pub(super) fn every_replica(devices: &[Device], nodes: usize) -> Vec<Device> {
    devices.repeat(nodes.max(1))
}

/// How rank 0 names what the run trains on: `ddp over 4 CPU replicas, 2 on
/// each of 2 nodes`, `ddp over cuda:0, cuda:1 on each of 2 nodes`.
pub(super) fn describe_devices(strategy: Strategy, devices: &[Device], nodes: usize) -> String {
    let per_node = if nodes > 1 {
        format!(", {} on each of {nodes} nodes", devices.len())
    } else {
        String::new()
    };
    match (strategy, devices) {
        (Strategy::Single, [device]) => device_name(*device),
        _ if devices.iter().all(|device| *device == Device::Cpu) => format!(
            "{} over {} CPU replicas{per_node} (one process each; give the stage GPUs with `resources.gpus`)",
            strategy.name(),
            devices.len() * nodes.max(1)
        ),
        _ => format!(
            "{} over {}{}",
            strategy.name(),
            devices
                .iter()
                .map(|device| device_name(*device))
                .collect::<Vec<_>>()
                .join(", "),
            if nodes > 1 {
                format!(" on each of {nodes} nodes")
            } else {
                String::new()
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_across_nodes_are_counted_and_named_per_node() {
        let cpus = [Device::Cpu];
        assert_eq!(every_replica(&cpus, 2), [Device::Cpu, Device::Cpu]);
        assert_eq!(
            describe_devices(Strategy::Ddp, &cpus, 2),
            "ddp over 2 CPU replicas, 1 on each of 2 nodes (one process each; give the stage GPUs with `resources.gpus`)"
        );
        assert_eq!(
            describe_devices(Strategy::Fsdp, &[Device::Cuda(0), Device::Cuda(1)], 2),
            "fsdp over cuda:0, cuda:1 on each of 2 nodes"
        );
        assert!(describe_devices(Strategy::Ddp, &[Device::Cpu; 2], 1)
            .starts_with("ddp over 2 CPU replicas ("));
    }
}
