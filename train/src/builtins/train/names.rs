//! The names the training stage's description and its run share: its
//! outputs, and the values some of its params accept.

pub(super) const CHECKPOINT: &str = "checkpoint";
pub(super) const CURVES: &str = "curves";
pub(super) const STEPS: &str = "steps";
pub(super) const STRATEGIES: &[&str] = &[
    "single",
    "ddp",
    "deepspeed_stage_2",
    "fsdp_shard_grad_op",
    "fsdp",
];
pub(super) const PROCESS_GROUP_BACKENDS: &[&str] = &["auto", "gloo", "nccl"];
pub(super) const COMMUNICATION_DTYPES: &[&str] = &["float32", "bfloat16"];
