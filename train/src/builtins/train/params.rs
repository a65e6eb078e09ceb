//! `with:` of `train/classifier@1` as one typed struct. The engine has
//! checked every value against the stage's `ParamSpec`s (types, choices,
//! ranges) at load, before anything ran, and the worker checks them again;
//! what is left here is what a single param's range cannot say: the rules
//! between params, and the two bounds that exclude their end.

use std::path::PathBuf;
use std::time::Duration;

use pipe_protocol::ParamRule;
use serde::{Deserialize, Deserializer};
use serde_json::json;
use tch::Device;

use pipe_stages::{Result, StageContext, StageError};

use crate::c10d;
use crate::precision::{self, Precision};
use crate::shard::Sharding;

/// The stage's params, one field per `ParamSpec` of its `StageInfo` (the
/// field's name, or its `rename`, is the param's).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TrainParams {
    pub(super) tokens: PathBuf,
    pub(super) model: PathBuf,
    pub(super) num_labels: i64,
    pub(super) epochs: u64,
    pub(super) batch_size: usize,
    pub(super) lr: f64,
    pub(super) weight_decay: f64,
    pub(super) warmup_ratio: f64,
    #[serde(rename = "accumulate_grad_batches")]
    pub(super) accumulate: usize,
    #[serde(rename = "gradient_clip_val")]
    pub(super) clip: Option<f64>,
    /// Unset (no pipeline `seed` either): 0.
    #[serde(deserialize_with = "unset_is_zero")]
    pub(super) seed: u64,
    pub(super) limit_train_samples: Option<usize>,
    #[serde(
        rename = "early_stopping_patience",
        deserialize_with = "saturating_u32"
    )]
    pub(super) patience: Option<u32>,
    pub(super) log_every_n_steps: u64,
    #[serde(deserialize_with = "precision_named")]
    pub(super) precision: Precision,
    pub(super) tf32: bool,
    pub(super) strategy: Strategy,
    pub(super) devices: usize,
    #[serde(rename = "num_nodes")]
    pub(super) nodes: usize,
    /// None: `auto`.
    #[serde(rename = "process_group_backend", deserialize_with = "backend_named")]
    pub(super) backend: Option<c10d::Backend>,
    /// The dtype of fsdp's gathers and reduce-scatters; None: the
    /// parameters' own.
    #[serde(rename = "communication_dtype", deserialize_with = "dtype_named")]
    pub(super) communication: Option<tch::Kind>,
    pub(super) fsdp_prefetch: bool,
    /// How long a replica waits for the others (`collective_timeout`).
    #[serde(rename = "collective_timeout", deserialize_with = "seconds")]
    pub(super) timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(super) enum Strategy {
    #[serde(rename = "single")]
    Single,
    #[serde(rename = "ddp")]
    Ddp,
    #[serde(rename = "deepspeed_stage_2")]
    DeepSpeedStage2,
    #[serde(rename = "fsdp_shard_grad_op")]
    FsdpShardGradOp,
    #[serde(rename = "fsdp")]
    Fsdp,
}

impl Strategy {
    pub(super) fn name(self) -> &'static str {
        match self {
            Strategy::Single => "single",
            Strategy::Ddp => "ddp",
            Strategy::DeepSpeedStage2 => "deepspeed_stage_2",
            Strategy::FsdpShardGradOp => "fsdp_shard_grad_op",
            Strategy::Fsdp => "fsdp",
        }
    }

    pub(super) fn sharding(self) -> Option<Sharding> {
        match self {
            Strategy::Single | Strategy::Ddp | Strategy::Fsdp => None,
            Strategy::DeepSpeedStage2 => Some(Sharding::Zero2),
            Strategy::FsdpShardGradOp => Some(Sharding::ShardGradOp),
        }
    }
}

fn unset_is_zero<'de, D: Deserializer<'de>>(deserializer: D) -> std::result::Result<u64, D::Error> {
    Ok(Option::<u64>::deserialize(deserializer)?.unwrap_or(0))
}

/// A patience past u32 is "never stop early" in practice; it is not worth
/// an error.
fn saturating_u32<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<u32>, D::Error> {
    Ok(Option::<u64>::deserialize(deserializer)?
        .map(|value| u32::try_from(value).unwrap_or(u32::MAX)))
}

fn precision_named<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Precision, D::Error> {
    let name = String::deserialize(deserializer)?;
    // A choice the engine has checked; this guards the day a name is added
    // to `precision::NAMES` before the code handles it.
    Precision::parse(&name).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "precision `{name}` is not implemented; use one of {}",
            precision::NAMES.join(", ")
        ))
    })
}

fn backend_named<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<c10d::Backend>, D::Error> {
    match String::deserialize(deserializer)?.as_str() {
        "auto" => Ok(None),
        "gloo" => Ok(Some(c10d::Backend::Gloo)),
        "nccl" => Ok(Some(c10d::Backend::Nccl)),
        other => Err(serde::de::Error::custom(format!(
            "process_group_backend `{other}` is not implemented; use one of {}",
            super::names::PROCESS_GROUP_BACKENDS.join(", ")
        ))),
    }
}

fn dtype_named<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<tch::Kind>, D::Error> {
    match String::deserialize(deserializer)?.as_str() {
        "float32" => Ok(None),
        "bfloat16" => Ok(Some(tch::Kind::BFloat16)),
        other => Err(serde::de::Error::custom(format!(
            "communication_dtype `{other}` is not implemented; use one of {}",
            super::names::COMMUNICATION_DTYPES.join(", ")
        ))),
    }
}

fn seconds<'de, D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Duration, D::Error> {
    u64::deserialize(deserializer).map(Duration::from_secs)
}

/// The rules between params that [`TrainParams::check`] enforces, declared
/// in the catalog so that `pipe validate` finds them, located, before the
/// stage runs.
pub(super) fn rules() -> Vec<ParamRule> {
    let single = |then: &str, hint: &str| ParamRule::When {
        param: "strategy".into(),
        is: vec![json!("single")],
        then: then.into(),
        must_be: vec![json!(1)],
        because: "strategy `single` trains on one device".into(),
        hint: hint.into(),
    };
    vec![
        single(
            "devices",
            "use `strategy: ddp` to train on several devices, or `devices: 1`",
        ),
        single(
            "num_nodes",
            "use `strategy: ddp` (or a sharded strategy) to train across nodes",
        ),
        ParamRule::When {
            param: "communication_dtype".into(),
            is: vec![json!("bfloat16")],
            then: "strategy".into(),
            must_be: vec![json!("fsdp")],
            because: "only fsdp gathers its parameters in another dtype than their own".into(),
            hint: "use `strategy: fsdp`, or leave communication_dtype out".into(),
        },
        ParamRule::When {
            param: "fsdp_prefetch".into(),
            is: vec![json!(false)],
            then: "strategy".into(),
            must_be: vec![json!("fsdp")],
            because: "only fsdp gathers layer by layer".into(),
            hint: "use `strategy: fsdp`, or leave fsdp_prefetch out".into(),
        },
        ParamRule::When {
            param: "tf32".into(),
            is: vec![json!(true)],
            then: "precision".into(),
            must_be: vec![json!("32-true")],
            because: "TF32 is a mode of fp32 matmuls".into(),
            hint: "set `precision: 32-true`, or leave tf32 out".into(),
        },
    ]
}

impl TrainParams {
    /// The invocation's params, typed, and the rules between them checked.
    pub(super) fn read(context: &StageContext) -> Result<TrainParams> {
        let params: TrainParams = context.params()?;
        params.check()?;
        Ok(params)
    }

    /// The rules of [`TrainParams::check`] that the engine can check when
    /// the pipeline loads, worded the same.
    fn check(&self) -> Result<()> {
        if self.strategy == Strategy::Single && self.nodes != 1 {
            return Err(StageError::param(
                "num_nodes",
                format!(
                    "is {}, but strategy `single` trains on one device",
                    self.nodes
                ),
                "use `strategy: ddp` (or a sharded strategy) to train across nodes",
            ));
        }
        if self.tf32 && self.precision != Precision::Fp32 {
            return Err(StageError::param(
                "tf32",
                format!(
                    "is true, but TF32 is a mode of fp32 matmuls and the precision is {}",
                    self.precision
                ),
                "set `precision: 32-true`, or leave tf32 out",
            ));
        }
        if self.strategy != Strategy::Fsdp && self.communication.is_some() {
            return Err(StageError::param(
                "strategy",
                format!(
                    "is {}, but only fsdp gathers its parameters in another dtype than their own",
                    self.strategy.name()
                ),
                "use `strategy: fsdp`, or leave communication_dtype out",
            ));
        }
        if self.strategy != Strategy::Fsdp && !self.fsdp_prefetch {
            return Err(StageError::param(
                "strategy",
                format!(
                    "is {}, but only fsdp gathers layer by layer",
                    self.strategy.name()
                ),
                "use `strategy: fsdp`, or leave fsdp_prefetch out",
            ));
        }
        if self.strategy == Strategy::Single && self.devices != 1 {
            return Err(StageError::param(
                "devices",
                format!(
                    "is {}, but strategy `single` trains on one device",
                    self.devices
                ),
                format!(
                    "use `strategy: ddp` to train on {} devices, or `devices: 1`",
                    self.devices
                ),
            ));
        }
        Ok(())
    }

    /// The process group's backend on `device`: NCCL between GPUs and Gloo
    /// between CPU replicas unless `process_group_backend` says otherwise.
    pub(super) fn backend_for(&self, device: Device) -> Result<c10d::Backend> {
        match (self.backend, device) {
            (Some(c10d::Backend::Nccl), Device::Cpu) => Err(StageError::param(
                "process_group_backend",
                "is nccl, but the replicas are on the CPU; NCCL moves CUDA tensors only",
                "leave it at auto (Gloo on CPUs), or give the stage GPUs with `resources.gpus`",
            )),
            (Some(backend), _) => Ok(backend),
            (None, Device::Cuda(_)) => Ok(c10d::Backend::Nccl),
            (None, _) => Ok(c10d::Backend::Gloo),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtins::classifier::checked_context;
    use pipe_stages::BuiltinStage;
    use serde_json::{json, Value};

    fn context(with: Value) -> std::result::Result<StageContext, Vec<String>> {
        checked_context(&super::super::TrainClassifier.info(), with)
    }

    fn read(with: Value) -> std::result::Result<TrainParams, String> {
        let context = context(with).map_err(|problems| problems.join("; "))?;
        TrainParams::read(&context).map_err(|error| error.to_string())
    }

    const REQUIRED: &str = r#"{"tokens": "/tokens", "model": "/model"}"#;

    fn with(extra: Value) -> Value {
        let mut with: Value = serde_json::from_str(REQUIRED).unwrap();
        with.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        with
    }

    /// Every ParamSpec has its field and every field its ParamSpec
    /// (`deny_unknown_fields`), and the defaults are what the loop used to
    /// read.
    #[test]
    fn the_defaults_of_every_param_spec_deserialize_into_the_struct() {
        let params = read(with(json!({}))).unwrap();
        assert_eq!(params.tokens, PathBuf::from("/tokens"));
        assert_eq!(params.num_labels, 2);
        assert_eq!(
            (params.epochs, params.batch_size, params.accumulate),
            (3, 12, 1)
        );
        assert_eq!(
            (params.lr, params.weight_decay, params.warmup_ratio),
            (5e-5, 0.01, 0.0)
        );
        assert_eq!((params.clip, params.seed, params.patience), (None, 0, None));
        assert_eq!(params.limit_train_samples, None);
        assert_eq!(params.log_every_n_steps, 50);
        assert_eq!(params.precision, Precision::Fp32);
        assert_eq!(params.strategy, Strategy::Single);
        assert_eq!((params.devices, params.nodes, params.backend), (1, 1, None));
        assert_eq!(params.timeout, Duration::from_secs(60));
        assert!(!params.tf32);
        assert_eq!((params.communication, params.fsdp_prefetch), (None, true));
    }

    #[test]
    fn every_choice_of_strategy_precision_and_backend_deserializes() {
        for &name in super::super::STRATEGIES {
            let params = read(with(json!({"strategy": name, "devices": 1}))).unwrap();
            assert_eq!(params.strategy.name(), name);
        }
        for &name in precision::NAMES {
            let params = read(with(json!({"precision": name}))).unwrap();
            assert_eq!(params.precision.name(), name);
        }
        for &name in super::super::PROCESS_GROUP_BACKENDS {
            let params = read(with(json!({"process_group_backend": name}))).unwrap();
            assert_eq!(params.backend.map_or("auto", c10d::Backend::name), name);
        }
        let params = read(with(
            json!({"seed": 7, "early_stopping_patience": 5_000_000_000u64}),
        ))
        .unwrap();
        assert_eq!((params.seed, params.patience), (7, Some(u32::MAX)));
    }

    /// The ranges live in the ParamSpecs, which the engine applies where
    /// the value is written, at load: a bad value never waits for the
    /// stages upstream of training to run.
    #[test]
    fn the_ranges_are_the_param_specs_own() {
        for (param, value, message) in [
            (
                "num_labels",
                json!(1),
                "param `num_labels` must be at least 2, not 1",
            ),
            (
                "epochs",
                json!(0),
                "param `epochs` must be at least 1, not 0",
            ),
            (
                "batch_size",
                json!(0),
                "param `batch_size` must be at least 1, not 0",
            ),
            (
                "lr",
                json!(-1),
                "param `lr` must be above 0 and at most 1, not -1",
            ),
            (
                "lr",
                json!(1.5),
                "param `lr` must be above 0 and at most 1, not 1.5",
            ),
            (
                "weight_decay",
                json!(2),
                "param `weight_decay` must be between 0 and 1, not 2",
            ),
            (
                "warmup_ratio",
                json!(-0.1),
                "param `warmup_ratio` must be between 0 and 1, not -0.1",
            ),
            (
                "accumulate_grad_batches",
                json!(0),
                "param `accumulate_grad_batches` must be at least 1, not 0",
            ),
            (
                "gradient_clip_val",
                json!(-1.0),
                "param `gradient_clip_val` must be above 0, not -1.0",
            ),
            (
                "lr",
                json!(0),
                "param `lr` must be above 0 and at most 1, not 0",
            ),
            (
                "gradient_clip_val",
                json!(0.0),
                "param `gradient_clip_val` must be above 0, not 0.0",
            ),
            (
                "limit_train_samples",
                json!(0),
                "param `limit_train_samples` must be at least 1, not 0",
            ),
            (
                "early_stopping_patience",
                json!(0),
                "param `early_stopping_patience` must be at least 1, not 0",
            ),
            (
                "log_every_n_steps",
                json!(0),
                "param `log_every_n_steps` must be at least 1, not 0",
            ),
            (
                "devices",
                json!(0),
                "param `devices` must be at least 1, not 0",
            ),
            (
                "num_nodes",
                json!(0),
                "param `num_nodes` must be at least 1, not 0",
            ),
            (
                "collective_timeout",
                json!(0),
                "param `collective_timeout` must be at least 1, not 0",
            ),
        ] {
            let problems = context(with(json!({ param: value })))
                .err()
                .unwrap_or_default();
            assert_eq!(problems, [message], "{param}: {value}");
        }
    }

    #[test]
    fn rules_between_params_are_checked_when_read() {
        let refused = |extra: Value| read(with(extra)).unwrap_err();
        // The catalog's rules come first, in the words `pipe validate` uses.
        let nodes = refused(json!({"num_nodes": 2}));
        assert!(
            nodes.contains("`num_nodes` is 2, but strategy `single`"),
            "{nodes}"
        );
        let devices = refused(json!({"devices": 2}));
        assert!(
            devices.contains("`devices` is 2, but strategy `single`"),
            "{devices}"
        );
        assert!(refused(json!({"tf32": true, "precision": "bf16-mixed"})).contains("TF32"));
        let dtype =
            refused(json!({"strategy": "ddp", "devices": 2, "communication_dtype": "bfloat16"}));
        assert!(dtype.contains("only fsdp gathers"), "{dtype}");
        assert!(refused(json!({"fsdp_prefetch": false})).contains("layer by layer"));
        let fsdp = read(with(json!({"strategy": "fsdp", "devices": 2,
                                    "communication_dtype": "bfloat16", "fsdp_prefetch": false})))
        .unwrap();
        assert_eq!(
            (fsdp.communication, fsdp.fsdp_prefetch),
            (Some(tch::Kind::BFloat16), false)
        );
        let read = read(with(
            json!({"strategy": "ddp", "devices": 2, "num_nodes": 2, "tf32": true}),
        ));
        assert!(read.is_ok(), "{read:?}");
    }
}
