//! Building blocks shared by BERT and DistilBERT, initialised as
//! `transformers`' `_init_weights` does so that a fresh head (or a tiny test
//! model) starts where a PyTorch run would.

use tch::nn::{self, Module};
use tch::Tensor;

use super::config::ModelConfig;

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

/// Multi-head self-attention up to (not including) the output projection,
/// whose name and surroundings differ between the two families.
#[derive(Debug)]
pub struct SelfAttention {
    query: nn::Linear,
    key: nn::Linear,
    value: nn::Linear,
    heads: i64,
    head_dim: i64,
    dropout: f64,
}

impl SelfAttention {
    /// `names` are the query, key and value sub-paths of `path`.
    pub fn new(path: &nn::Path, names: [&str; 3], config: &ModelConfig) -> Self {
        let hidden = config.hidden_size;
        SelfAttention {
            query: linear(path / names[0], hidden, hidden, config),
            key: linear(path / names[1], hidden, hidden, config),
            value: linear(path / names[2], hidden, hidden, config),
            heads: config.num_attention_heads,
            head_dim: config.head_dim(),
            dropout: config.attention_probs_dropout_prob,
        }
    }

    /// `xs` is (batch, seq, hidden); `mask` a boolean (batch, 1, 1, seq),
    /// true where a key may be attended to, or None when nothing is padded.
    /// Returns the heads' outputs merged back to (batch, seq, hidden).
    pub fn forward_t(&self, xs: &Tensor, mask: Option<&Tensor>, train: bool) -> Tensor {
        let (batch, seq, hidden) = match xs.size()[..] {
            [batch, seq, hidden] => (batch, seq, hidden),
            // Shapes are checked at the model's entry point.
            _ => unreachable!("attention input must be 3-D"),
        };
        let split = |tensor: Tensor| {
            tensor
                .view([batch, seq, self.heads, self.head_dim])
                .transpose(1, 2)
        };
        let query = split(self.query.forward(xs));
        let key = split(self.key.forward(xs));
        let value = split(self.value.forward(xs));
        // The fused kernel picks the flash or memory-efficient path when it
        // can, and applies attention dropout itself; its default scale is
        // 1/sqrt(head_dim), as in both models.
        let context = Tensor::scaled_dot_product_attention(
            &query,
            &key,
            &value,
            mask,
            if train { self.dropout } else { 0.0 },
            false,
            None,
            false,
        );
        context
            .transpose(1, 2)
            .contiguous()
            .view([batch, seq, hidden])
    }
}
