//! `BertForSequenceClassification`: the encoder under `bert.`, then the
//! pooler (dense + tanh on the first token), dropout and the classifier.

use tch::nn::{self, Module};
use tch::{Kind, Tensor};

use super::config::{Activation, ModelConfig};
use std::sync::Arc;

use super::layers::{embedding, layer_norm, linear, Dropout, DropoutMasks, SelfAttention};

#[derive(Debug)]
struct Embeddings {
    word: nn::Embedding,
    position: nn::Embedding,
    token_type: nn::Embedding,
    norm: nn::LayerNorm,
    dropout: Dropout,
}

impl Embeddings {
    fn new(path: &nn::Path, config: &ModelConfig, masks: &Arc<DropoutMasks>) -> Self {
        let hidden = config.hidden_size;
        Embeddings {
            word: embedding(path / "word_embeddings", config.vocab_size, hidden, config),
            position: embedding(
                path / "position_embeddings",
                config.max_position_embeddings,
                hidden,
                config,
            ),
            token_type: embedding(
                path / "token_type_embeddings",
                config.type_vocab_size,
                hidden,
                config,
            ),
            norm: layer_norm(path / "LayerNorm", config),
            dropout: Dropout::new(config.hidden_dropout_prob, masks),
        }
    }

    fn forward_t(
        &self,
        input_ids: &Tensor,
        token_type_ids: Option<&Tensor>,
        train: bool,
    ) -> Tensor {
        let seq = input_ids.size()[1];
        let positions = Tensor::arange(seq, (Kind::Int64, input_ids.device())).unsqueeze(0);
        let mut xs = self.word.forward(input_ids) + self.position.forward(&positions);
        xs = match token_type_ids {
            Some(ids) => xs + self.token_type.forward(ids),
            // HF's default: every token in segment 0. Row 0 broadcast over
            // the batch is the same and saves a gather.
            None => xs + self.token_type.ws.get(0),
        };
        self.dropout.forward_t(&self.norm.forward(&xs), train)
    }
}

#[derive(Debug)]
struct Layer {
    attention: SelfAttention,
    attention_output: nn::Linear,
    attention_norm: nn::LayerNorm,
    intermediate: nn::Linear,
    activation: Activation,
    output: nn::Linear,
    output_norm: nn::LayerNorm,
    dropout: Dropout,
}

impl Layer {
    fn new(path: &nn::Path, config: &ModelConfig, masks: &Arc<DropoutMasks>) -> Self {
        let hidden = config.hidden_size;
        let attention = path / "attention";
        Layer {
            attention: SelfAttention::new(
                &(&attention / "self"),
                ["query", "key", "value"],
                config,
                masks,
            ),
            attention_output: linear(&attention / "output" / "dense", hidden, hidden, config),
            attention_norm: layer_norm(&attention / "output" / "LayerNorm", config),
            intermediate: linear(
                path / "intermediate" / "dense",
                hidden,
                config.intermediate_size,
                config,
            ),
            activation: config.hidden_act,
            output: linear(
                path / "output" / "dense",
                config.intermediate_size,
                hidden,
                config,
            ),
            output_norm: layer_norm(path / "output" / "LayerNorm", config),
            dropout: Dropout::new(config.hidden_dropout_prob, masks),
        }
    }

    /// Every position's output, or with `first_only` the first
    /// position's alone, (batch, 1, hidden): all the head reads of the last
    /// layer. Its keys and values still come from every position, and its
    /// dropout masks are the whole layer's (`Dropout::forward_first_t`).
    fn forward_t(
        &self,
        xs: &Tensor,
        mask: Option<&Tensor>,
        train: bool,
        first_only: bool,
    ) -> Tensor {
        let seq = xs.size()[1];
        let dropout = |tensor: &Tensor| {
            if first_only {
                let size = tensor.size();
                let whole = [size[0], seq, size[2]];
                self.dropout.forward_first_t(tensor, &whole, 1, train)
            } else {
                self.dropout.forward_t(tensor, train)
            }
        };
        let (context, residual) = if first_only {
            (
                self.attention.forward_first_t(xs, mask, train),
                xs.narrow(1, 0, 1),
            )
        } else {
            (
                self.attention.forward_t(xs, mask, train),
                xs.shallow_clone(),
            )
        };
        let projected = self.attention_output.forward(&context);
        let attended = self
            .attention_norm
            .forward(&(dropout(&projected) + residual));
        let inner = self.activation.apply(&self.intermediate.forward(&attended));
        let output = self.output.forward(&inner);
        self.output_norm.forward(&(dropout(&output) + attended))
    }
}

#[derive(Debug)]
pub struct BertForSequenceClassification {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    pooler: nn::Linear,
    classifier: nn::Linear,
    classifier_dropout: Dropout,
}

impl BertForSequenceClassification {
    pub fn new(
        root: &nn::Path,
        config: &ModelConfig,
        num_labels: i64,
        masks: &Arc<DropoutMasks>,
    ) -> Self {
        let bert = root / "bert";
        let layers = &bert / "encoder" / "layer";
        BertForSequenceClassification {
            embeddings: Embeddings::new(&(&bert / "embeddings"), config, masks),
            layers: (0..config.num_hidden_layers)
                .map(|index| Layer::new(&(&layers / index), config, masks))
                .collect(),
            pooler: linear(
                &bert / "pooler" / "dense",
                config.hidden_size,
                config.hidden_size,
                config,
            ),
            classifier: linear(root / "classifier", config.hidden_size, num_labels, config),
            classifier_dropout: Dropout::new(config.classifier_dropout, masks),
        }
    }

    /// The hidden states the head reads: (batch, 1, hidden), the last
    /// layer's at the first position (see [`layer`](Self::layer)).
    pub fn encode(
        &self,
        input_ids: &Tensor,
        token_type_ids: Option<&Tensor>,
        mask: Option<&Tensor>,
        train: bool,
    ) -> Tensor {
        let mut xs = self.embed(input_ids, token_type_ids, train);
        for index in 0..self.layers.len() {
            xs = self.layer(index, &xs, mask, train);
        }
        xs
    }

    pub fn forward_t(
        &self,
        input_ids: &Tensor,
        token_type_ids: Option<&Tensor>,
        mask: Option<&Tensor>,
        train: bool,
    ) -> Tensor {
        let hidden = self.encode(input_ids, token_type_ids, mask, train);
        self.head(&hidden, train)
    }

    /// The embeddings' output, (batch, seq, hidden): the first of the
    /// pieces `forward_t` is made of, which `crate::fsdp` runs one by one.
    pub fn embed(
        &self,
        input_ids: &Tensor,
        token_type_ids: Option<&Tensor>,
        train: bool,
    ) -> Tensor {
        self.embeddings.forward_t(input_ids, token_type_ids, train)
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Encoder layer `index` on the hidden states `xs`. The last one
    /// computes the first position only, (batch, 1, hidden): the pooler
    /// reads nothing else, and the rest of that layer would be a sixth of
    /// MiniLM-L6's work thrown away.
    pub fn layer(&self, index: usize, xs: &Tensor, mask: Option<&Tensor>, train: bool) -> Tensor {
        let last = index + 1 == self.layers.len();
        self.layers[index].forward_t(xs, mask, train, last)
    }

    /// The pooler, dropout and classifier on the last hidden states: logits.
    pub fn head(&self, hidden: &Tensor, train: bool) -> Tensor {
        let pooled = self.pooler.forward(&hidden.select(1, 0)).tanh();
        self.classifier
            .forward(&self.classifier_dropout.forward_t(&pooled, train))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tch::Device;

    use super::*;

    /// The last layer's first position alone is the whole layer's first
    /// position, in eval and in training: the same dropout masks drawn,
    /// and as many.
    #[test]
    fn the_first_position_alone_is_the_whole_layers_first_position_masks_included() {
        let config = ModelConfig::from_json(
            json!({"model_type": "bert", "vocab_size": 50, "hidden_size": 16,
                                         "num_hidden_layers": 1, "num_attention_heads": 2,
                                         "intermediate_size": 24, "max_position_embeddings": 16}),
        )
        .unwrap();
        let store = nn::VarStore::new(Device::Cpu);
        let masks = Arc::new(DropoutMasks::default());
        let layer = Layer::new(&store.root(), &config, &masks);
        tch::manual_seed(1);
        let xs = Tensor::randn([2, 6, 16], (Kind::Float, Device::Cpu));
        // The second row is padded after 4 tokens.
        let keep = Tensor::from_slice(&[1i64, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0])
            .view([2, 1, 1, 6])
            .ne(0);
        for train in [false, true] {
            masks.reseed(7);
            let whole = layer.forward_t(&xs, Some(&keep), train, false);
            let drawn = masks.drawn();
            masks.reseed(7);
            let first = layer.forward_t(&xs, Some(&keep), train, true);
            assert_eq!(first.size(), [2, 1, 16]);
            assert!(
                first.allclose(&whole.narrow(1, 0, 1), 1e-5, 1e-6, false),
                "train {train}"
            );
            assert_eq!(masks.drawn(), drawn, "train {train}");
        }
    }
}
