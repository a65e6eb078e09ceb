//! Full sharding: `strategy: fsdp`, PyTorch FSDP's `FULL_SHARD` (ZeRO
//! stage 3), the study's `strategy="fsdp"`.
//!
//! The model is cut into units, FSDP's usual wrapping of a transformer:
//! the embeddings, each layer, the head (`SequenceClassifier::unit_of`).
//! Each unit's parameters are flattened (FSDP's `FlatParameter`), padded
//! to `N * ceil(n / N)` elements, and replica `r` keeps part `r` of them,
//! of their gradients and of AdamW's state. Nothing else stays between
//! steps: the model's variables are empty tensors at rest, and no moment
//! of the run, validation and the checkpoint included, holds more than two
//! units' full parameters.
//!
//! A micro-batch (`passes::forward_backward_by_unit`):
//!
//! 1. **Forward, unit by unit, without autograd.** Each unit's parameters
//!    are all-gathered right before its forward and freed right after it;
//!    only the unit's input (the hidden states) is kept, as activation
//!    checkpointing keeps it. The head runs last with autograd and the
//!    loss on top of it.
//! 2. **Backward, unit by unit from the top.** tch exposes no hook into
//!    autograd, so backward does what FSDP with activation checkpointing
//!    does: gather the unit's parameters again, recompute its forward with
//!    autograd from the saved input (made a leaf that requires grad), and
//!    backward it with the gradient that came down from the unit above
//!    (`(output * grad).sum().backward()`, whose gradient at `output` is
//!    exactly `grad`). The input's gradient goes on down; the unit's
//!    parameter gradients are reduce-scattered at once into this
//!    replica's gradient shard (added to it under gradient accumulation),
//!    and the unit's full parameters and gradients are freed.
//! 3. **Prefetch.** The all-gather of the unit that runs next is started
//!    before the current unit computes, on c10d's own threads, and waited
//!    for only when that unit starts (FSDP's `forward_prefetch` and
//!    `BackwardPrefetch.BACKWARD_PRE`); the wait is what the step-time
//!    breakdown counts as collective time. One gather is in flight at a
//!    time, so a replica holds at most two units' parameters.
//! 4. **Dropout draws the same masks in the recompute** as in the first
//!    forward: the state of the model's dropout (the count of CPU masks,
//!    and on a GPU its generator's state) is taken before each unit's
//!    first forward and put back before its recompute, then set to where
//!    the whole forward left it, as `torch.utils.checkpoint` preserves the
//!    RNG state. The masks are those of every other strategy, in the same
//!    order.
//!
//! **Communication precision** (`communication_dtype: bfloat16`, FSDP's
//! `MixedPrecision(param_dtype=bf16, reduce_dtype=bf16)`): the fp32 shards
//! stay the master copy AdamW steps; a step's gathers carry the shard cast
//! to bf16, so the unit computes with bf16 parameters, its gradients are
//! bf16 and are reduce-scattered as bf16, then added into the fp32
//! gradient shard. Half the bytes on the wire and in the gathered units.
//! The checkpoint is gathered in fp32 whatever this says.
//!
//! After the micro-batches the optimizer step is that of the other sharded
//! strategies (`crate::shard`): unscale and clip on the shards (flags and
//! squares all-reduced), fused AdamW on the shard; the updated shards stay
//! where they are, to be gathered unit by unit in the next step.
//!
//! **Validation and the checkpoint** never gather the whole model:
//! validation runs the units in turn as training's forward does
//! ([`ShardingStrategy::eval_forward`]), and the checkpoint is written by
//! handing each gathered unit's tensors to a writer
//! ([`ShardingStrategy::visit_weights`]) that puts them at their place in
//! the safetensors file on rank 0, before the unit is freed.
//!
//! Memory per replica: P/N parameters, P/N gradients and 2P/N AdamW state
//! at rest; during a step, at most those plus two units' parameters (the
//! one computing, the one arriving) and one unit's gradients, plus the
//! activations: one hidden state per unit and one unit's graph.
//! [`ShardingStrategy::peak_bytes`] measures the parameter and gradient
//! bytes alive at each gather and after each unit's backward during the
//! first optimizer step, the first validation batch and the checkpoint.
//! The price is a second forward of every unit but the head (about a third
//! more compute) and two all-gathers of P per micro-batch instead of one
//! per step.
//!
//! Arithmetic: the forward and backward of each unit are the operations of
//! the whole model's, so without gradient accumulation and with fp32
//! communication the weights are those of the other strategies to within
//! the order of the sums; under accumulation each micro-batch's gradients
//! are summed across replicas before being added to the previous
//! micro-batches', as FSDP does outside `no_sync`, which rounds
//! differently from ddp's local accumulation.

mod passes;
mod state;
mod strategy;
mod units;

pub use state::{units_of, Communication, FullShard};
