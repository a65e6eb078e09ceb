//! AdamW as `torch.optim.AdamW(fused=True)`: decoupled weight decay, bias
//! correction, one fused libtorch kernel per parameter group and step
//! (`at::_fused_adamw_` through shims/csrc/optim.cpp, after one `_foreach_add_`
//! that counts the group's steps). `zero_grad` frees the gradients, as
//! `zero_grad(set_to_none=True)`, torch.optim's default; a parameter
//! without a gradient is left out of clipping and of the step, as torch.optim
//! leaves it. tch's `nn::AdamW` runs the
//! C++ `torch::optim::AdamW`, about five elementwise passes over every
//! parameter per step; at MiniLM's 22.7 M parameters that was 6% of a
//! training step on the CPU (docs/performance.md).

use std::ffi::{c_char, c_int, c_void};

use tch::{Kind, TchError, Tensor};

use crate::ffi::call_shim;

extern "C" {
    fn pipe_fused_adamw(
        params: *const *mut c_void,
        grads: *const *mut c_void,
        exp_avgs: *const *mut c_void,
        exp_avg_sqs: *const *mut c_void,
        steps: *const *mut c_void,
        count: c_int,
        lr: f64,
        beta1: f64,
        beta2: f64,
        weight_decay: f64,
        eps: f64,
        error: *mut c_char,
        error_size: usize,
    ) -> c_int;
    fn pipe_clear_grads(
        params: *const *mut c_void,
        count: c_int,
        error: *mut c_char,
        error_size: usize,
    ) -> c_int;
}

/// libtorch's `_foreach_*` kernels (shims/csrc/optim.cpp), which tch does not
/// bind: one call per list of tensors, nothing read back to the host.
pub mod foreach {
    use std::ffi::{c_char, c_int, c_void};

    use tch::{Kind, TchError, Tensor};

    extern "C" {
        fn pipe_foreach_zero(
            tensors: *const *mut c_void,
            count: c_int,
            error: *mut c_char,
            error_size: usize,
        ) -> c_int;
        fn pipe_foreach_norm(
            tensors: *const *mut c_void,
            count: c_int,
            out: *mut c_void,
            error: *mut c_char,
            error_size: usize,
        ) -> c_int;
        fn pipe_foreach_mul(
            tensors: *const *mut c_void,
            count: c_int,
            factor: *mut c_void,
            error: *mut c_char,
            error_size: usize,
        ) -> c_int;
        fn pipe_foreach_unscale(
            tensors: *const *mut c_void,
            count: c_int,
            found_inf: *mut c_void,
            inv_scale: *mut c_void,
            error: *mut c_char,
            error_size: usize,
        ) -> c_int;
    }

    fn pointers(tensors: &[Tensor]) -> Vec<*mut c_void> {
        tensors
            .iter()
            .map(|tensor| tensor.as_ptr() as *mut c_void)
            .collect()
    }

    /// Runs a shim with an error buffer; its message becomes a TchError.
    fn call(body: impl FnOnce(*mut c_char, usize) -> c_int) -> Result<(), TchError> {
        crate::ffi::call_shim(body).map_err(TchError::Torch)
    }

    /// Zeroes every tensor in place.
    pub fn zero(tensors: &[Tensor]) -> Result<(), TchError> {
        if tensors.is_empty() {
            return Ok(());
        }
        let list = pointers(tensors);
        // SAFETY: `list` holds live handles and outlives the call; the shim
        // copies them and reports C++ exceptions through the buffer.
        call(|error, size| unsafe {
            pipe_foreach_zero(list.as_ptr(), list.len() as c_int, error, size)
        })
    }

    /// The L2 norm of all the tensors together, as a 0-dim fp32 tensor on
    /// their device (zero for none).
    pub fn norm(tensors: &[Tensor]) -> Result<Tensor, TchError> {
        let Some(first) = tensors.first() else {
            return Tensor::f_zeros([], (Kind::Float, tch::Device::Cpu));
        };
        let out = Tensor::f_zeros([], (Kind::Float, first.device()))?;
        let list = pointers(tensors);
        // SAFETY: as in `zero`; `out` is a live tensor the shim copies into.
        call(|error, size| unsafe {
            pipe_foreach_norm(
                list.as_ptr(),
                list.len() as c_int,
                out.as_ptr() as *mut c_void,
                error,
                size,
            )
        })?;
        Ok(out)
    }

    /// Multiplies every tensor in place by `factor`, a 0-dim tensor on
    /// their device.
    pub fn mul(tensors: &[Tensor], factor: &Tensor) -> Result<(), TchError> {
        if tensors.is_empty() {
            return Ok(());
        }
        let list = pointers(tensors);
        // SAFETY: as in `zero`.
        call(|error, size| unsafe {
            pipe_foreach_mul(
                list.as_ptr(),
                list.len() as c_int,
                factor.as_ptr() as *mut c_void,
                error,
                size,
            )
        })
    }

    /// Multiplies every tensor by `inv_scale` and sets `found_inf` to 1
    /// where any holds inf or NaN (both 1-element fp32 tensors on the
    /// tensors' device), as `GradScaler.unscale_`. The tensors must be of
    /// one device; fp32 or fp16.
    pub fn unscale(
        tensors: &[Tensor],
        found_inf: &Tensor,
        inv_scale: &Tensor,
    ) -> Result<(), TchError> {
        if tensors.is_empty() {
            return Ok(());
        }
        let list = pointers(tensors);
        // SAFETY: as in `zero`.
        call(|error, size| unsafe {
            pipe_foreach_unscale(
                list.as_ptr(),
                list.len() as c_int,
                found_inf.as_ptr() as *mut c_void,
                inv_scale.as_ptr() as *mut c_void,
                error,
                size,
            )
        })
    }
}

/// `max_norm / (norm + 1e-6)`, at most 1, computed on the norm's device:
/// the factor `clip_grad_norm_` multiplies the gradients by.
pub fn clip_coefficient(norm: &Tensor, max_norm: f64) -> Result<Tensor, TchError> {
    norm.f_add_scalar(1e-6)?
        .f_reciprocal()?
        .f_mul_scalar(max_norm)?
        .f_clamp_max(1.0)
}

#[derive(Debug, thiserror::Error)]
pub enum OptimError {
    #[error("fused AdamW: {0}")]
    Kernel(String),
    #[error("a saved AdamW state does not fit: {0}")]
    Restore(String),
    #[error("libtorch: {0}")]
    Torch(#[from] TchError),
}

/// A parameter and its optimizer state, created at its first step as
/// PyTorch does (zeros in the parameter's dtype, a float step count on
/// its device).
struct Slot {
    param: Tensor,
    /// Where the gradient is when it is not `param.grad()`: the sharded
    /// strategies step views of a shard, whose gradients come from the
    /// reduce-scatter, not from autograd.
    grad: Option<Tensor>,
    state: Option<[Tensor; 3]>,
}

impl Slot {
    fn grad(&self) -> Tensor {
        match &self.grad {
            Some(grad) => grad.shallow_clone(),
            None => self.param.grad(),
        }
    }
}

struct Group {
    weight_decay: f64,
    slots: Vec<Slot>,
}

pub struct AdamW {
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    groups: Vec<Group>,
}

impl AdamW {
    /// `groups`: parameters (shallow clones of the model's variables) and
    /// their weight decay.
    pub fn new(
        groups: Vec<(Vec<Tensor>, f64)>,
        lr: f64,
        beta1: f64,
        beta2: f64,
        eps: f64,
    ) -> AdamW {
        let groups = groups
            .into_iter()
            .map(|(params, weight_decay)| {
                (
                    params.into_iter().map(|param| (param, None)).collect(),
                    weight_decay,
                )
            })
            .collect();
        AdamW::of_slots(groups, lr, beta1, beta2, eps)
    }

    /// As [`AdamW::new`], but each parameter comes with the tensor that
    /// holds its gradient.
    pub fn with_gradients(
        groups: Vec<(Vec<(Tensor, Tensor)>, f64)>,
        lr: f64,
        beta1: f64,
        beta2: f64,
        eps: f64,
    ) -> AdamW {
        let groups = groups
            .into_iter()
            .map(|(pairs, weight_decay)| {
                let slots = pairs.into_iter().map(|(param, grad)| (param, Some(grad)));
                (slots.collect(), weight_decay)
            })
            .collect();
        AdamW::of_slots(groups, lr, beta1, beta2, eps)
    }

    #[allow(clippy::type_complexity)]
    fn of_slots(
        groups: Vec<(Vec<(Tensor, Option<Tensor>)>, f64)>,
        lr: f64,
        beta1: f64,
        beta2: f64,
        eps: f64,
    ) -> AdamW {
        AdamW {
            lr,
            beta1,
            beta2,
            eps,
            groups: groups
                .into_iter()
                .map(|(slots, weight_decay)| Group {
                    weight_decay,
                    slots: slots
                        .into_iter()
                        .map(|(param, grad)| Slot {
                            param,
                            grad,
                            state: None,
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// Bytes of optimizer state held (the two moments and the step count
    /// of every parameter that has stepped): what the sharded strategies
    /// cut to 1/N per replica.
    pub fn state_bytes(&self) -> usize {
        self.groups
            .iter()
            .flat_map(|group| &group.slots)
            .filter_map(|slot| slot.state.as_ref())
            .flatten()
            .map(|tensor| tensor.numel() * tensor.kind().elt_size_in_bytes())
            .sum()
    }

    pub fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    /// Every parameter (groups in order, each in the order given) with its
    /// state: the two moments and the step count, None before its first
    /// step. Shallow clones, for saving: with the same parameters in the
    /// same order, [`AdamW::restore`] makes the optimizer this one again.
    pub fn slots(&self) -> Vec<(Tensor, Option<[Tensor; 3]>)> {
        self.groups
            .iter()
            .flat_map(|group| &group.slots)
            .map(|slot| {
                let state = slot.state.as_ref().map(|[moment, square, step]| {
                    [
                        moment.shallow_clone(),
                        square.shallow_clone(),
                        step.shallow_clone(),
                    ]
                });
                (slot.param.shallow_clone(), state)
            })
            .collect()
    }

    /// Each parameter's shape and kind, in [`AdamW::slots`]' order: what a
    /// saved state must match.
    pub fn slot_layout(&self) -> Vec<(Vec<i64>, Kind)> {
        self.groups
            .iter()
            .flat_map(|group| &group.slots)
            .map(|slot| (slot.param.size(), slot.param.kind()))
            .collect()
    }

    /// Puts back what [`AdamW::slots`] gave, from tensors anywhere (the
    /// host, read from a file): each parameter's values copied into it in
    /// place (a view into a shard stays that view), its state onto its
    /// device. Refused before anything is written unless every shape and
    /// kind matches [`AdamW::slot_layout`].
    pub fn restore(&mut self, saved: &[(Tensor, Option<[Tensor; 3]>)]) -> Result<(), OptimError> {
        let layout = self.slot_layout();
        if saved.len() != layout.len() {
            return Err(OptimError::Restore(format!(
                "{} parameters saved, {} here",
                saved.len(),
                layout.len()
            )));
        }
        for (index, ((param, state), (size, kind))) in saved.iter().zip(&layout).enumerate() {
            let fits = |tensor: &Tensor| tensor.size() == *size && tensor.kind() == *kind;
            let state_fits = state.as_ref().is_none_or(|[moment, square, step]| {
                fits(moment) && fits(square) && step.numel() == 1 && step.kind() == Kind::Float
            });
            if !fits(param) || !state_fits {
                return Err(OptimError::Restore(format!(
                    "parameter {index} is {size:?} {kind:?} here, not as saved"
                )));
            }
        }
        let _no_grad = tch::no_grad_guard();
        let slots = self.groups.iter_mut().flat_map(|group| &mut group.slots);
        for (slot, (param, state)) in slots.zip(saved) {
            slot.param.shallow_clone().f_copy_(param)?;
            slot.state = match state {
                None => None,
                Some([moment, square, step]) => {
                    let device = slot.param.device();
                    Some([
                        moment
                            .f_to_device(device)?
                            .f_contiguous()?
                            .f_detach_copy()?,
                        square
                            .f_to_device(device)?
                            .f_contiguous()?
                            .f_detach_copy()?,
                        step.f_to_device(device)?.f_reshape([])?.f_detach_copy()?,
                    ])
                }
            };
        }
        Ok(())
    }

    fn params(&self) -> impl Iterator<Item = &Tensor> {
        self.groups
            .iter()
            .flat_map(|group| group.slots.iter().map(|slot| &slot.param))
    }

    fn defined_grads(&self) -> Vec<Tensor> {
        self.params()
            .map(Tensor::grad)
            .filter(Tensor::defined)
            .collect()
    }

    /// Frees every parameter's gradient (`param.grad = None`), as
    /// `optimizer.zero_grad()` does by default since PyTorch 2.0: backward
    /// then writes fresh gradients instead of adding into zeroed buffers,
    /// which saves a pass over every gradient and frees their memory
    /// between steps. A parameter the next backward does not reach keeps no
    /// gradient, and clipping and [`AdamW::step`] leave it out.
    pub fn zero_grad(&self) -> Result<(), OptimError> {
        let params: Vec<*mut c_void> = self
            .params()
            .map(|param| param.as_ptr() as *mut c_void)
            .collect();
        if params.is_empty() {
            return Ok(());
        }
        // SAFETY: `params` holds live tensor handles (the slots own them)
        // and outlives the call; the shim reports C++ exceptions through
        // the buffer.
        call_shim(|error, size| unsafe {
            pipe_clear_grads(params.as_ptr(), params.len() as c_int, error, size)
        })
        .map_err(OptimError::Kernel)
    }

    /// Scales the gradients down so that their global L2 norm is at most
    /// `max_norm`, as `torch.nn.utils.clip_grad_norm_` (same epsilon, fp32
    /// norms), and returns the norm before clipping as a 0-dim tensor on
    /// the gradients' device: nothing waits for the device here.
    pub fn clip_grad_norm(&self, max_norm: f64) -> Result<Tensor, OptimError> {
        let grads = self.defined_grads();
        let total = foreach::norm(&grads)?;
        if !grads.is_empty() {
            foreach::mul(&grads, &clip_coefficient(&total, max_norm)?)?;
        }
        Ok(total)
    }

    /// One AdamW step over every parameter that has a gradient: one
    /// foreach call counts the steps and one fused kernel steps, per group.
    pub fn step(&mut self) -> Result<(), OptimError> {
        self.step_active(None)
    }

    /// [`AdamW::step`], skipping the parameters whose entry of `active`
    /// (one per parameter, groups in order) is false: a sharded replica's
    /// views always have a gradient tensor, even where the variable had
    /// none.
    pub fn step_active(&mut self, active: Option<&[bool]>) -> Result<(), OptimError> {
        let (lr, beta1, beta2, eps) = (self.lr, self.beta1, self.beta2, self.eps);
        let mut slot_index = 0usize;
        for group in &mut self.groups {
            let mut params = Vec::new();
            let mut grads = Vec::new();
            let mut moments = Vec::new();
            let mut squares = Vec::new();
            let mut steps = Vec::new();
            for slot in &mut group.slots {
                let index = slot_index;
                slot_index += 1;
                if active.is_some_and(|active| !active.get(index).copied().unwrap_or(true)) {
                    continue;
                }
                let grad = slot.grad();
                if !grad.defined() {
                    continue;
                }
                if slot.state.is_none() {
                    let device = slot.param.device();
                    slot.state = Some([
                        slot.param.f_zeros_like()?,
                        slot.param.f_zeros_like()?,
                        Tensor::f_zeros([], (Kind::Float, device))?,
                    ]);
                }
                let Some([moment, square, step]) = &slot.state else {
                    continue;
                };
                // The shim counts the steps (one `_foreach_add_` over the
                // group) before the kernel reads them, as torch.optim's
                // `_fused_adamw` does.
                params.push(slot.param.shallow_clone());
                grads.push(grad);
                moments.push(moment.shallow_clone());
                squares.push(square.shallow_clone());
                steps.push(step.shallow_clone());
            }
            if params.is_empty() {
                continue;
            }
            let pointers = |tensors: &[Tensor]| -> Vec<*mut c_void> {
                tensors
                    .iter()
                    .map(|tensor| tensor.as_ptr() as *mut c_void)
                    .collect()
            };
            let (p, g, m, v, s) = (
                pointers(&params),
                pointers(&grads),
                pointers(&moments),
                pointers(&squares),
                pointers(&steps),
            );
            // SAFETY: five arrays of `params.len()` live tensor handles
            // (the vectors above outlive the call); the shim copies the
            // handles and reports C++ exceptions through the buffer.
            call_shim(|error, size| unsafe {
                pipe_fused_adamw(
                    p.as_ptr(),
                    g.as_ptr(),
                    m.as_ptr(),
                    v.as_ptr(),
                    s.as_ptr(),
                    params.len() as c_int,
                    lr,
                    beta1,
                    beta2,
                    group.weight_decay,
                    eps,
                    error,
                    size,
                )
            })
            .map_err(OptimError::Kernel)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AdamW by the formula (decoupled decay, then the bias-corrected step).
    fn reference(params: &mut [f64], grads: &[Vec<f64>], lr: f64, weight_decay: f64) {
        let (beta1, beta2, eps) = (0.9, 0.999, 1e-8);
        let mut m = vec![0.0; params.len()];
        let mut v = vec![0.0; params.len()];
        for (t, grad) in grads.iter().enumerate() {
            let t = t as i32 + 1;
            for i in 0..params.len() {
                m[i] = beta1 * m[i] + (1.0 - beta1) * grad[i];
                v[i] = beta2 * v[i] + (1.0 - beta2) * grad[i] * grad[i];
                params[i] *= 1.0 - lr * weight_decay;
                let m_hat = m[i] / (1.0 - beta1.powi(t));
                let v_hat = v[i] / (1.0 - beta2.powi(t));
                params[i] -= lr * m_hat / (v_hat.sqrt() + eps);
            }
        }
    }

    #[test]
    fn three_fused_steps_follow_the_formula_per_group() {
        let start = [0.5f32, -1.0, 2.0, 0.0];
        let grads = [
            vec![0.1, -0.2, 0.3, 0.0],
            vec![-0.05, 0.4, 0.1, 0.2],
            vec![0.3, 0.3, -0.3, -0.1],
        ];
        let decayed = Tensor::from_slice(&start).set_requires_grad(true);
        let undecayed = Tensor::from_slice(&start).set_requires_grad(true);
        let mut optimizer = AdamW::new(
            vec![
                (vec![decayed.shallow_clone()], 0.1),
                (vec![undecayed.shallow_clone()], 0.0),
            ],
            0.01,
            0.9,
            0.999,
            1e-8,
        );
        for grad in &grads {
            optimizer.zero_grad().unwrap();
            let weights = Tensor::from_slice(&grad.iter().map(|&g| g as f32).collect::<Vec<_>>());
            for param in [&decayed, &undecayed] {
                (param * &weights).sum(Kind::Float).backward();
            }
            optimizer.step().unwrap();
        }
        for (param, weight_decay) in [(&decayed, 0.1), (&undecayed, 0.0)] {
            let mut expected: Vec<f64> = start.iter().map(|&x| f64::from(x)).collect();
            reference(&mut expected, &grads, 0.01, weight_decay);
            let actual = Vec::<f32>::try_from(param.detach()).unwrap();
            for (a, e) in actual.iter().zip(&expected) {
                assert!(
                    (f64::from(*a) - e).abs() < 1e-6,
                    "{actual:?} vs {expected:?}"
                );
            }
        }
    }

    /// An optimizer restored from another's slots steps as that one
    /// does, bit for bit; slots of another shape are refused untouched.
    #[test]
    fn restored_slots_step_as_the_original_and_a_misfit_is_refused() {
        let make = || {
            let param = Tensor::from_slice(&[0.5f32, -1.0, 2.0]).set_requires_grad(true);
            let optimizer = AdamW::new(
                vec![(vec![param.shallow_clone()], 0.1)],
                0.01,
                0.9,
                0.999,
                1e-8,
            );
            (param, optimizer)
        };
        let step = |param: &Tensor, optimizer: &mut AdamW, grad: [f32; 3]| {
            optimizer.zero_grad().unwrap();
            (param * Tensor::from_slice(&grad))
                .sum(Kind::Float)
                .backward();
            optimizer.step().unwrap();
        };
        let (original, mut first) = make();
        step(&original, &mut first, [0.1, -0.2, 0.3]);
        let (copy, mut second) = make();
        assert!(second.slots()[0].1.is_none());
        second.restore(&first.slots()).unwrap();
        assert!(copy.equal(&original));
        step(&original, &mut first, [0.3, 0.3, -0.1]);
        step(&copy, &mut second, [0.3, 0.3, -0.1]);
        assert!(copy.equal(&original), "{copy} vs {original}");

        let wider = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]);
        let refused = second.restore(&[(wider, None)]).unwrap_err();
        assert!(
            refused.to_string().contains("parameter 0 is [3]"),
            "{refused}"
        );
        assert!(copy.equal(&original));
    }

    /// zero_grad frees the gradients; a parameter that the next backward
    /// does not reach keeps none, and clipping and the step leave it out
    /// (no weight decay, no moment update, no step counted), as
    /// torch.optim does with `zero_grad(set_to_none=True)`.
    #[test]
    fn freed_gradients_leave_unreached_parameters_out_of_clipping_and_the_step() {
        let used = Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true);
        let sometimes = Tensor::from_slice(&[0.5f32]).set_requires_grad(true);
        let mut optimizer = AdamW::new(
            vec![(vec![used.shallow_clone(), sometimes.shallow_clone()], 0.1)],
            0.01,
            0.9,
            0.999,
            1e-8,
        );
        // Step 1 reaches both.
        optimizer.zero_grad().unwrap();
        ((&used * Tensor::from_slice(&[3.0f32, 4.0])).sum(Kind::Float)
            + (&sometimes * 2.0).sum(Kind::Float))
        .backward();
        optimizer.step().unwrap();
        // Two moments and a 0-dim step count each, fp32.
        assert_eq!(optimizer.state_bytes(), (2 + 2 + 1) * 4 + (1 + 1 + 1) * 4);
        let after_one = Vec::<f32>::try_from(sometimes.detach()).unwrap();
        // Step 2 reaches `used` only.
        optimizer.zero_grad().unwrap();
        assert!(!used.grad().defined(), "zero_grad left a gradient");
        assert!(!sometimes.grad().defined(), "zero_grad left a gradient");
        (&used * Tensor::from_slice(&[3.0f32, 4.0]))
            .sum(Kind::Float)
            .backward();
        assert!(!sometimes.grad().defined());
        // The norm is over the gradients there are: |(3, 4)| = 5.
        let norm = optimizer.clip_grad_norm(1.0).unwrap().double_value(&[]);
        assert!((norm - 5.0).abs() < 1e-6, "{norm}");
        optimizer.step().unwrap();
        assert_eq!(
            Vec::<f32>::try_from(sometimes.detach()).unwrap(),
            after_one,
            "a parameter without a gradient was stepped"
        );
        let steps: Vec<f64> = optimizer.groups[0]
            .slots
            .iter()
            .map(|slot| slot.state.as_ref().unwrap()[2].double_value(&[]))
            .collect();
        assert_eq!(steps, [2.0, 1.0], "step counts");
        // With nothing reached, the step is a no-op and clipping reports 0.
        optimizer.zero_grad().unwrap();
        assert_eq!(
            optimizer.clip_grad_norm(1.0).unwrap().double_value(&[]),
            0.0
        );
        optimizer.step().unwrap();
    }

    #[test]
    fn clipping_scales_to_the_global_norm_and_reports_it() {
        let a = Tensor::from_slice(&[0.0f32, 0.0]).set_requires_grad(true);
        let b = Tensor::from_slice(&[0.0f32]).set_requires_grad(true);
        (&a * Tensor::from_slice(&[3.0f32, 0.0]))
            .sum(Kind::Float)
            .backward();
        (&b * Tensor::from_slice(&[4.0f32]))
            .sum(Kind::Float)
            .backward();
        let optimizer = AdamW::new(
            vec![(vec![a.shallow_clone(), b.shallow_clone()], 0.0)],
            0.1,
            0.9,
            0.999,
            1e-8,
        );
        let norm = optimizer.clip_grad_norm(1.0).unwrap().double_value(&[]);
        assert!((norm - 5.0).abs() < 1e-6);
        let clipped = Vec::<f32>::try_from(a.grad()).unwrap();
        assert!((clipped[0] - 0.6).abs() < 1e-5, "{clipped:?}");
        // Under the threshold nothing changes.
        assert!((optimizer.clip_grad_norm(10.0).unwrap().double_value(&[]) - 1.0).abs() < 1e-5);
        assert!((Vec::<f32>::try_from(b.grad()).unwrap()[0] - 0.8).abs() < 1e-5);
    }
}
