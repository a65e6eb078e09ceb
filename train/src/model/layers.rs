//! Building blocks shared by BERT and DistilBERT, initialised as
//! `transformers`' `_init_weights` does so that a fresh head (or a tiny test
//! model) starts where a PyTorch run would.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rayon::prelude::*;
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

use super::config::ModelConfig;
use pipe_stages::rng::SplitMix64;

pub fn linear(path: nn::Path, in_dim: i64, out_dim: i64, config: &ModelConfig) -> nn::Linear {
    nn::linear(
        path,
        in_dim,
        out_dim,
        nn::LinearConfig {
            ws_init: nn::Init::Randn {
                mean: 0.0,
                stdev: config.initializer_range,
            },
            bs_init: Some(nn::Init::Const(0.0)),
            bias: true,
        },
    )
}

pub fn embedding(path: nn::Path, count: i64, dim: i64, config: &ModelConfig) -> nn::Embedding {
    nn::embedding(
        path,
        count,
        dim,
        nn::EmbeddingConfig {
            ws_init: nn::Init::Randn {
                mean: 0.0,
                stdev: config.initializer_range,
            },
            ..Default::default()
        },
    )
}

pub fn layer_norm(path: nn::Path, config: &ModelConfig) -> nn::LayerNorm {
    nn::layer_norm(
        path,
        vec![config.hidden_size],
        nn::LayerNormConfig {
            eps: config.layer_norm_eps,
            ..Default::default()
        },
    )
}

/// Where a model's CPU dropout masks come from: a seed and a count of the
/// masks drawn so far. Mask `n` depends on (seed, n) only, so a seeded run
/// draws the same masks whatever the threads.
///
/// Why not libtorch's dropout on the CPU: it draws its mask with
/// `bernoulli_`, about 5 ns per element on this machine, which made
/// dropout about a seventh of a MiniLM training step (profiled: see
/// docs/performance.md). SplitMix64 on rayon threads draws the same
/// Bernoulli(1 - p) mask in a fifth of that. On a GPU libtorch's own
/// dropout is fast and stays.
#[derive(Debug, Default)]
pub struct DropoutMasks {
    seed: AtomicU64,
    drawn: AtomicU64,
}

/// Elements per independently seeded chunk of a mask: large enough to
/// amortise the seeding, small enough to spread a 1 M-element mask over
/// the cores.
const MASK_CHUNK: usize = 1 << 16;

impl DropoutMasks {
    /// Restarts the mask sequence from `seed`.
    pub fn reseed(&self, seed: u64) {
        self.seed.store(seed, Ordering::Relaxed);
        self.drawn.store(0, Ordering::Relaxed);
    }

    /// How many masks have been drawn since the seed: with the seed, all
    /// that decides the next mask.
    pub fn drawn(&self) -> u64 {
        self.drawn.load(Ordering::Relaxed)
    }

    /// Makes the next mask the `drawn`-th of the sequence again, so that a
    /// forward recomputed from there draws the masks it drew the first
    /// time (`crate::fsdp`, as activation checkpointing restores the RNG).
    pub fn rewind(&self, drawn: u64) {
        self.drawn.store(drawn, Ordering::Relaxed);
    }

    /// A (0 or 1/(1-p)) mask of `numel` elements, each kept with
    /// probability 1 - p, as f32.
    fn draw(&self, numel: usize, p: f64) -> Vec<f32> {
        let index = self.drawn.fetch_add(1, Ordering::Relaxed);
        let seed = self.seed.load(Ordering::Relaxed);
        let stream = SplitMix64::new(seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03)).next_u64();
        // An element is dropped when its 32 random bits fall below p * 2^32.
        let threshold = (p * 4_294_967_296.0).round().min(u32::MAX as f64) as u32;
        let keep = (1.0 / (1.0 - p)) as f32;
        let mut mask = vec![0f32; numel];
        mask.par_chunks_mut(MASK_CHUNK)
            .enumerate()
            .for_each(|(chunk, values)| {
                let mut rng = SplitMix64::new(stream.wrapping_add(chunk as u64));
                for pair in values.chunks_mut(2) {
                    let bits = rng.next_u64();
                    for (slot, draw) in pair.iter_mut().zip([bits as u32, (bits >> 32) as u32]) {
                        *slot = if draw >= threshold { keep } else { 0.0 };
                    }
                }
            });
        mask
    }
}

/// Dropout with probability `p`: inverted (kept values scaled by
/// 1/(1-p)), as `torch.nn.Dropout`.
#[derive(Debug, Clone)]
pub struct Dropout {
    p: f64,
    masks: Arc<DropoutMasks>,
}

impl Dropout {
    pub fn new(p: f64, masks: &Arc<DropoutMasks>) -> Dropout {
        Dropout {
            p,
            masks: Arc::clone(masks),
        }
    }

    pub fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        if !train || self.p <= 0.0 {
            return xs.shallow_clone();
        }
        if xs.device() != Device::Cpu || self.p >= 1.0 {
            return xs.dropout(self.p, train);
        }
        xs * self.mask(&xs.size(), xs.kind())
    }

    /// [`forward_t`](Self::forward_t) of the first slice along `dim` of a
    /// tensor of shape `whole`: the CPU mask is drawn for `whole`, as the
    /// whole tensor's forward would draw it, and its first slice applied,
    /// so that computing the first position alone draws and applies the
    /// masks that computing them all would.
    pub fn forward_first_t(&self, xs: &Tensor, whole: &[i64], dim: i64, train: bool) -> Tensor {
        if !train || self.p <= 0.0 {
            return xs.shallow_clone();
        }
        if xs.device() != Device::Cpu || self.p >= 1.0 {
            return xs.dropout(self.p, train);
        }
        xs * self.mask(whole, xs.kind()).narrow(dim, 0, 1)
    }

    /// The next CPU mask, of `shape`, in `kind`.
    fn mask(&self, shape: &[i64], kind: Kind) -> Tensor {
        let numel = shape.iter().product::<i64>() as usize;
        let mask = Tensor::from_slice(&self.masks.draw(numel, self.p)).view(shape);
        if kind == Kind::Float {
            mask
        } else {
            mask.to_kind(kind)
        }
    }
}

/// Multi-head self-attention up to (not including) the output projection,
/// whose name and surroundings differ between the two families.
#[derive(Debug)]
pub struct SelfAttention {
    query: nn::Linear,
    key: nn::Linear,
    value: nn::Linear,
    heads: i64,
    head_dim: i64,
    dropout: Dropout,
}

impl SelfAttention {
    /// `names` are the query, key and value sub-paths of `path`.
    pub fn new(
        path: &nn::Path,
        names: [&str; 3],
        config: &ModelConfig,
        masks: &Arc<DropoutMasks>,
    ) -> Self {
        let hidden = config.hidden_size;
        SelfAttention {
            query: linear(path / names[0], hidden, hidden, config),
            key: linear(path / names[1], hidden, hidden, config),
            value: linear(path / names[2], hidden, hidden, config),
            heads: config.num_attention_heads,
            head_dim: config.head_dim(),
            dropout: Dropout::new(config.attention_probs_dropout_prob, masks),
        }
    }

    /// `xs` is (batch, seq, hidden); `mask` a boolean (batch, 1, 1, seq),
    /// true where a key may be attended to, or None when nothing is padded.
    /// Returns the heads' outputs merged back to (batch, seq, hidden).
    pub fn forward_t(&self, xs: &Tensor, mask: Option<&Tensor>, train: bool) -> Tensor {
        self.attend(xs, mask, train, false)
    }

    /// [`forward_t`](Self::forward_t) for the first position's query
    /// only, over every position's keys and values: (batch, 1, hidden),
    /// what the whole forward gives at position 0, with the same dropout
    /// masks.
    pub fn forward_first_t(&self, xs: &Tensor, mask: Option<&Tensor>, train: bool) -> Tensor {
        self.attend(xs, mask, train, true)
    }

    fn attend(&self, xs: &Tensor, mask: Option<&Tensor>, train: bool, first_only: bool) -> Tensor {
        let (batch, seq, hidden) = match xs.size()[..] {
            [batch, seq, hidden] => (batch, seq, hidden),
            // Shapes are checked at the model's entry point.
            _ => unreachable!("attention input must be 3-D"),
        };
        let queries = if first_only { 1 } else { seq };
        let split = |tensor: Tensor, length: i64| {
            tensor
                .view([batch, length, self.heads, self.head_dim])
                .transpose(1, 2)
        };
        let (query, key, value) = self.project(xs, first_only);
        let (query, key, value) = (split(query, queries), split(key, seq), split(value, seq));
        let context = if train && self.dropout.p > 0.0 && xs.device() == Device::Cpu {
            // What the fused kernel does on the CPU with dropout (its flash
            // path has none), spelled out so that the attention weights go
            // through our dropout rather than libtorch's slow draw.
            let scale = 1.0 / (self.head_dim as f64).sqrt();
            let scores = query.matmul(&key.transpose(-2, -1)) * scale;
            let scores = match mask {
                Some(mask) => scores.masked_fill(&mask.logical_not(), f64::NEG_INFINITY),
                None => scores,
            };
            let weights = scores.softmax(-1, scores.kind());
            let weights = if first_only {
                let whole = [batch, self.heads, seq, seq];
                self.dropout.forward_first_t(&weights, &whole, 2, true)
            } else {
                self.dropout.forward_t(&weights, true)
            };
            weights.matmul(&value)
        } else {
            // The fused kernel picks the flash or memory-efficient path
            // when it can, and applies attention dropout itself; its
            // default scale is 1/sqrt(head_dim), as in both models.
            Tensor::scaled_dot_product_attention(
                &query,
                &key,
                &value,
                mask,
                if train { self.dropout.p } else { 0.0 },
                false,
                None,
                false,
            )
        };
        context
            .transpose(1, 2)
            .contiguous()
            .view([batch, queries, hidden])
    }

    /// The query, key and value projections, (batch, length, hidden) each:
    /// of every position, or the query of the first position alone.
    ///
    /// One (hidden x 3 hidden) projection instead of three (or hidden x 2
    /// hidden for the keys and values beside the first position's query):
    /// a wider matmul that the BLAS runs closer to peak, forward and
    /// backward. The parameters stay three tensors under their HF names;
    /// the concatenation costs a copy of the weights per call.
    fn project(&self, xs: &Tensor, first_only: bool) -> (Tensor, Tensor, Tensor) {
        let hidden = xs.size()[2];
        let biases = match (&self.query.bs, &self.key.bs, &self.value.bs) {
            (Some(query), Some(key), Some(value)) => Some([query, key, value]),
            _ => None,
        };
        if first_only {
            let query = self.query.forward(&xs.narrow(1, 0, 1));
            let keys_values = match biases {
                Some([_, key_bias, value_bias]) => xs.linear(
                    &Tensor::cat(&[&self.key.ws, &self.value.ws], 0),
                    Some(&Tensor::cat(&[key_bias, value_bias], 0)),
                ),
                None => Tensor::cat(&[self.key.forward(xs), self.value.forward(xs)], -1),
            };
            let parts = keys_values.split(hidden, -1);
            return (query, parts[0].shallow_clone(), parts[1].shallow_clone());
        }
        let projected = match biases {
            Some([query_bias, key_bias, value_bias]) => xs.linear(
                &Tensor::cat(&[&self.query.ws, &self.key.ws, &self.value.ws], 0),
                Some(&Tensor::cat(&[query_bias, key_bias, value_bias], 0)),
            ),
            None => Tensor::cat(
                &[
                    self.query.forward(xs),
                    self.key.forward(xs),
                    self.value.forward(xs),
                ],
                -1,
            ),
        };
        let parts = projected.split(hidden, -1);
        (
            parts[0].shallow_clone(),
            parts[1].shallow_clone(),
            parts[2].shallow_clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_keep_one_minus_p_scaled_and_repeat_with_the_seed() {
        let masks = DropoutMasks::default();
        masks.reseed(42);
        let first = masks.draw(1_000_003, 0.1);
        let second = masks.draw(1_000_003, 0.1);
        let kept = first.iter().filter(|&&value| value != 0.0).count() as f64;
        // 1e6 Bernoulli(0.9) draws: the standard deviation of the kept
        // fraction is 3e-4, so 0.005 is over 15 of them.
        assert!((kept / 1_000_003.0 - 0.9).abs() < 0.005, "kept {kept}");
        let scale = (1.0 / 0.9) as f32;
        assert!(first.iter().all(|&value| value == 0.0 || value == scale));
        assert_ne!(first, second, "each draw is a new mask");
        masks.reseed(42);
        assert_eq!(
            masks.draw(1_000_003, 0.1),
            first,
            "the same seed, the same masks"
        );
        masks.reseed(43);
        assert_ne!(masks.draw(1_000_003, 0.1), first);
    }

    #[test]
    fn dropout_is_the_identity_in_eval_and_scales_kept_values_in_training() {
        let masks = Arc::new(DropoutMasks::default());
        let dropout = Dropout::new(0.25, &masks);
        let xs = Tensor::ones([64, 1000], (Kind::Float, Device::Cpu));
        assert!(dropout.forward_t(&xs, false).equal(&xs));
        let dropped = Vec::<f32>::try_from(dropout.forward_t(&xs, true).flatten(0, -1)).unwrap();
        assert!(dropped
            .iter()
            .all(|&v| v == 0.0 || (v - 4.0 / 3.0).abs() < 1e-6));
        let mean = dropped.iter().map(|&v| f64::from(v)).sum::<f64>() / dropped.len() as f64;
        assert!((mean - 1.0).abs() < 0.02, "expectation kept: {mean}");
        let bf16 = dropout.forward_t(&xs.to_kind(Kind::BFloat16), true);
        assert_eq!(bf16.kind(), Kind::BFloat16);
    }
}
