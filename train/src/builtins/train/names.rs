//! The names the training stage's description and its run share: its
//! outputs, and the values some of its params accept.

pub(super) const CHECKPOINT: &str = "checkpoint";
/// The checkpoint's weights, as `save_pretrained` names them.
pub(super) const WEIGHTS_FILE: &str = "model.safetensors";
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
