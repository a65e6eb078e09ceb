//! Numeric precision of training, with Lightning's names and meanings:
//!
//! - `32-true`: fp32 weights, activations and optimizer.
//! - `bf16-mixed` / `16-mixed`: fp32 weights and optimizer; the forward runs
//!   under autocast, which casts the inputs of matmul-like ops to bf16/fp16
//!   and keeps precision-sensitive ops (softmax, layer norm, losses) in
//!   fp32. `16-mixed` adds a dynamic loss scaler, because fp16's narrow
//!   exponent range flushes small gradients to zero.
//! - `bf16-true`: the weights themselves are bf16, and so is the optimizer
//!   state; no autocast.
//!
//! tch only wraps CUDA fp16 autocast, so [`AutocastGuard`] goes through a
//! small C++ shim (shims/csrc/autocast.cpp, built by the shims crate) that calls
//! libtorch's per-device-type autocast API, CPU bf16 included.

use std::ffi::{c_char, c_int};
use std::fmt;

use tch::{Device, Kind, Tensor};

use crate::ffi::call_shim;

/// The accepted `precision` values, the default first.
pub const NAMES: &[&str] = &["32-true", "bf16-mixed", "16-mixed", "bf16-true"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Fp32,
    Bf16Mixed,
    Fp16Mixed,
    Bf16True,
}

impl Precision {
    pub fn parse(name: &str) -> Option<Precision> {
        Some(match name {
            "32-true" => Precision::Fp32,
            "bf16-mixed" => Precision::Bf16Mixed,
            "16-mixed" => Precision::Fp16Mixed,
            "bf16-true" => Precision::Bf16True,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "32-true",
            Precision::Bf16Mixed => "bf16-mixed",
            Precision::Fp16Mixed => "16-mixed",
            Precision::Bf16True => "bf16-true",
        }
    }

    /// The dtype autocast casts to, for the mixed precisions.
    pub fn autocast_kind(self) -> Option<Kind> {
        match self {
            Precision::Bf16Mixed => Some(Kind::BFloat16),
            Precision::Fp16Mixed => Some(Kind::Half),
            Precision::Fp32 | Precision::Bf16True => None,
        }
    }

    /// The dtype the matmuls run in: what MFU's peak is for.
    pub fn compute_kind(self) -> Kind {
        match self {
            Precision::Fp32 => Kind::Float,
            Precision::Fp16Mixed => Kind::Half,
            _ => Kind::BFloat16,
        }
    }

    /// The dtype of the weights and optimizer state.
    pub fn weight_kind(self) -> Kind {
        match self {
            Precision::Bf16True => Kind::BFloat16,
            _ => Kind::Float,
        }
    }

    /// Whether `device` can run this precision; Err says why not and what
    /// to use instead. Refusing is deliberate: silently training in another
    /// precision than asked would make the run's numbers mean something
    /// else than its config says.
    pub fn check_device(self, device: Device) -> Result<(), PrecisionError> {
        // First whether the device is there at all: a matmul probe (or
        // tch's weight initialisation) on a missing GPU fails with a
        // message about dtypes or panics.
        if let Device::Cuda(index) = device {
            let visible = if tch::Cuda::is_available() {
                usize::try_from(tch::Cuda::device_count()).unwrap_or(0)
            } else {
                0
            };
            if index >= visible {
                return Err(PrecisionError::NoDevice {
                    device: format!("cuda:{index}"),
                    reason: if visible == 0 {
                        crate::hardware::why_no_cuda()
                    } else {
                        format!("libtorch sees {visible} CUDA device(s)")
                    },
                });
            }
        }
        if self == Precision::Fp16Mixed && device == Device::Cpu {
            return Err(PrecisionError::Unsupported {
                precision: self.name(),
                device: "the CPU".into(),
                reason: "fp16 mixed precision with loss scaling is a GPU mode (Lightning \
                         offers no CPU 16-mixed either)"
                    .into(),
                hint: "use `precision: bf16-mixed` on the CPU, or give the stage a GPU \
                       (`resources.gpus: 1`)",
            });
        }
        if let Some(kind) = self.autocast_kind().or(match self {
            Precision::Bf16True => Some(Kind::BFloat16),
            _ => None,
        }) {
            // libtorch has no query for "this device can do bf16/fp16
            // matmuls"; running a tiny one is the answer that counts.
            let probe = Tensor::f_ones([2, 2], (kind, device))
                .and_then(|t| t.f_matmul(&t))
                .and_then(|t| t.f_sum(Kind::Float))
                .map(|t| t.double_value(&[]));
            if let Err(error) = probe {
                return Err(PrecisionError::Unsupported {
                    precision: self.name(),
                    device: format!("{device:?}"),
                    reason: format!("libtorch cannot run a {kind:?} matmul there: {error}"),
                    hint: "use `precision: 32-true`",
                });
            }
        }
        Ok(())
    }
}

extern "C" {
    fn pipe_allow_tf32(error: *mut c_char, error_size: usize) -> c_int;
}

/// Lets fp32 matmuls run on TF32 tensor cores for the rest of the process
/// (`torch.set_float32_matmul_precision("high")`): the `tf32` opt-in of
/// the train stage under 32-true.
pub fn allow_tf32() -> Result<(), PrecisionError> {
    // SAFETY: the shim sets one libtorch global and reports C++ exceptions
    // through the buffer.
    call_shim(|error, size| unsafe { pipe_allow_tf32(error, size) })
        .map_err(PrecisionError::Autocast)
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PrecisionError {
    #[error("precision `{precision}` is not available on {device}: {reason}")]
    Unsupported {
        precision: &'static str,
        device: String,
        reason: String,
        hint: &'static str,
    },
    #[error("{device} is not available: {reason}")]
    NoDevice { device: String, reason: String },
    #[error("autocast: {0}")]
    Autocast(String),
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

impl PrecisionError {
    pub fn hint(&self) -> &'static str {
        match self {
            PrecisionError::Unsupported { hint, .. } => hint,
            PrecisionError::NoDevice { .. } => {
                "run on a machine with a CUDA GPU, or train on the CPU"
            }
            PrecisionError::Autocast(_) | PrecisionError::Torch(_) => "",
        }
    }
}

// The codes of shims/csrc/autocast.cpp.
const DEVICE_CPU: c_int = 0;
const DEVICE_CUDA: c_int = 1;
const DTYPE_BF16: c_int = 0;
const DTYPE_F16: c_int = 1;

extern "C" {
    fn pipe_autocast_enter(
        device: c_int,
        dtype: c_int,
        previous_enabled: *mut c_int,
        previous_dtype: *mut c_int,
        previous_cache: *mut c_int,
        error: *mut c_char,
        error_size: usize,
    ) -> c_int;
    pub(crate) fn pipe_autocast_exit(
        device: c_int,
        previous_enabled: c_int,
        previous_dtype: c_int,
        previous_cache: c_int,
        error: *mut c_char,
        error_size: usize,
    ) -> c_int;
    fn pipe_autocast_is_enabled(device: c_int) -> c_int;
}

fn device_code(device: Device) -> Result<c_int, PrecisionError> {
    match device {
        Device::Cpu => Ok(DEVICE_CPU),
        Device::Cuda(_) => Ok(DEVICE_CUDA),
        other => Err(PrecisionError::Autocast(format!(
            "no autocast for device {other:?} here (CPU and CUDA only)"
        ))),
    }
}

/// Autocast on for one device type while the guard lives, on this thread
/// (libtorch keeps autocast state per thread). Dropping it restores the
/// previous state, so guards nest like Python's `with torch.autocast(...)`.
/// Run the forward and the loss under the guard and `backward()` after it,
/// as PyTorch recommends.
#[must_use = "autocast is off again as soon as the guard is dropped"]
pub struct AutocastGuard {
    device: c_int,
    previous_enabled: c_int,
    previous_dtype: c_int,
    previous_cache: c_int,
}

impl AutocastGuard {
    /// `kind` is BFloat16 or Half.
    pub fn new(device: Device, kind: Kind) -> Result<AutocastGuard, PrecisionError> {
        let device = device_code(device)?;
        let dtype = match kind {
            Kind::BFloat16 => DTYPE_BF16,
            Kind::Half => DTYPE_F16,
            other => {
                return Err(PrecisionError::Autocast(format!(
                    "autocast casts to BFloat16 or Half, not {other:?}"
                )))
            }
        };
        let mut guard = AutocastGuard {
            device,
            previous_enabled: 0,
            previous_dtype: -1,
            previous_cache: 1,
        };
        // SAFETY: plain ints and the helper's buffer; the shim catches every
        // C++ exception.
        call_shim(|error, size| unsafe {
            pipe_autocast_enter(
                device,
                dtype,
                &mut guard.previous_enabled,
                &mut guard.previous_dtype,
                &mut guard.previous_cache,
                error,
                size,
            )
        })
        .map_err(PrecisionError::Autocast)?;
        Ok(guard)
    }

    /// Whether autocast is on for `device` on this thread.
    pub fn is_enabled(device: Device) -> bool {
        match device_code(device) {
            // SAFETY: a plain int in and out.
            Ok(code) => unsafe { pipe_autocast_is_enabled(code) == 1 },
            Err(_) => false,
        }
    }
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        // SAFETY: as in `new`.
        let restored = call_shim(|error, size| unsafe {
            pipe_autocast_exit(
                self.device,
                self.previous_enabled,
                self.previous_dtype,
                self.previous_cache,
                error,
                size,
            )
        });
        // Only a bad device code (impossible: `new` checked it) or a libtorch
        // exception from restoring flags land here; Drop cannot return it.
        if let Err(message) = restored {
            eprintln!("autocast: restoring the previous state failed: {message}");
        }
    }
}

/// Dynamic loss scaling as `torch.amp.GradScaler`: the loss is multiplied
/// by `scale` before backward so that fp16 gradients do not underflow; the
/// gradients are divided back before clipping and the step. A step whose
/// gradients hold inf/NaN is skipped and the scale halved; after
/// `growth_interval` good steps in a row it doubles.
#[derive(Debug, Clone)]
pub struct LossScaler {
    scale: f64,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: u32,
    good_steps: u32,
    skipped_steps: u64,
}

impl Default for LossScaler {
    /// GradScaler's defaults: 2^16, x2 every 2000 steps, x0.5 on overflow.
    fn default() -> Self {
        LossScaler::new(65536.0, 2.0, 0.5, 2000)
    }
}

impl LossScaler {
    pub fn new(
        init_scale: f64,
        growth_factor: f64,
        backoff_factor: f64,
        growth_interval: u32,
    ) -> Self {
        LossScaler {
            scale: init_scale,
            growth_factor,
            backoff_factor,
            growth_interval,
            good_steps: 0,
            skipped_steps: 0,
        }
    }

    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Steps skipped so far for non-finite gradients.
    pub fn skipped_steps(&self) -> u64 {
        self.skipped_steps
    }

    /// What changes as it runs: the scale, the good steps since it last
    /// changed, the steps skipped. A resumed run puts it back with
    /// [`LossScaler::restore`] and scales as the uninterrupted run would.
    pub fn state(&self) -> (f64, u32, u64) {
        (self.scale, self.good_steps, self.skipped_steps)
    }

    pub fn restore(&mut self, (scale, good_steps, skipped_steps): (f64, u32, u64)) {
        self.scale = scale;
        self.good_steps = good_steps;
        self.skipped_steps = skipped_steps;
    }

    /// The loss to call `backward()` on.
    pub fn scale_loss(&self, loss: &Tensor) -> Result<Tensor, tch::TchError> {
        loss.f_mul_scalar(self.scale)
    }

    /// Divides every defined gradient by the scale, in place, and says
    /// whether any of them holds inf or NaN. One host sync for all of them.
    pub fn unscale(&self, parameters: &[Tensor]) -> Result<bool, tch::TchError> {
        let grads: Vec<Tensor> = parameters.iter().map(Tensor::grad).collect();
        self.unscale_gradients(&grads)
    }

    /// [`LossScaler::unscale`] of gradient tensors themselves (a sharded
    /// replica's shard of them); undefined ones are skipped.
    pub fn unscale_gradients(&self, grads: &[Tensor]) -> Result<bool, tch::TchError> {
        let found = self.unscale_on_device(grads)?;
        Ok(match found {
            Some(found) => found.f_double_value(&[0])? > 0.0,
            None => false,
        })
    }

    /// Divides the gradients by the scale in one foreach call per dtype
    /// (`GradScaler.unscale_`), leaving the verdict on the device: a
    /// 1-element fp32 tensor, nonzero when any gradient holds inf or NaN
    /// (None when there is no gradient). The caller reads it once, or
    /// all-reduces it first (sharded replicas).
    pub fn unscale_on_device(&self, grads: &[Tensor]) -> Result<Option<Tensor>, tch::TchError> {
        let defined: Vec<Tensor> = grads
            .iter()
            .filter(|grad| grad.defined())
            .map(Tensor::shallow_clone)
            .collect();
        let Some(first) = defined.first() else {
            return Ok(None);
        };
        let device = first.device();
        let found = Tensor::f_zeros([1], (Kind::Float, device))?;
        let inverse = Tensor::f_full([1], 1.0 / self.scale, (Kind::Float, device))?;
        let mut kinds: Vec<Kind> = Vec::new();
        for grad in &defined {
            if !kinds.contains(&grad.kind()) {
                kinds.push(grad.kind());
            }
        }
        for kind in kinds {
            let of_kind: Vec<Tensor> = defined
                .iter()
                .filter(|grad| grad.kind() == kind)
                .map(Tensor::shallow_clone)
                .collect();
            crate::optim::foreach::unscale(&of_kind, &found, &inverse)?;
        }
        Ok(Some(found))
    }

    /// Records a step's outcome and adjusts the scale: returns whether the
    /// optimizer should step (false when the gradients overflowed).
    pub fn update(&mut self, found_non_finite: bool) -> bool {
        if found_non_finite {
            self.scale *= self.backoff_factor;
            self.good_steps = 0;
            self.skipped_steps += 1;
            return false;
        }
        self.good_steps += 1;
        if self.good_steps == self.growth_interval {
            self.scale *= self.growth_factor;
            self.good_steps = 0;
        }
        true
    }
}
