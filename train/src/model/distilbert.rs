//! `DistilBertForSequenceClassification`: the encoder under `distilbert.`,
//! then on the first token `pre_classifier`, ReLU, dropout and the
//! classifier. No pooler, no token types.

use tch::nn::{self, Module};
use tch::{Kind, Tensor};

use super::config::{Activation, ModelConfig};
use std::sync::Arc;

use super::layers::{embedding, layer_norm, linear, Dropout, DropoutMasks, SelfAttention};

#[derive(Debug)]
struct Embeddings {
    word: nn::Embedding,
    position: nn::Embedding,
    norm: nn::LayerNorm,
    dropout: Dropout,
}

impl Embeddings {
    fn new(path: &nn::Path, config: &ModelConfig, masks: &Arc<DropoutMasks>) -> Self {
        let hidden = config.hidden_size;
        Embeddings {
            word: embedding(path / "word_embeddings", config.vocab_size, hidden, config),
            // With `sinusoidal_pos_embds` HF fills this table with fixed
            // values, but it still saves them under this name, so loading
            // covers that case too.
            position: embedding(
                path / "position_embeddings",
                config.max_position_embeddings,
                hidden,
                config,
            ),
            norm: layer_norm(path / "LayerNorm", config),
            dropout: Dropout::new(config.hidden_dropout_prob, masks),
        }
    }

    fn forward_t(&self, input_ids: &Tensor, train: bool) -> Tensor {
        let seq = input_ids.size()[1];
        let positions = Tensor::arange(seq, (Kind::Int64, input_ids.device())).unsqueeze(0);
        let xs = self.word.forward(input_ids) + self.position.forward(&positions);
        self.dropout.forward_t(&self.norm.forward(&xs), train)
    }
}

#[derive(Debug)]
struct Layer {
    attention: SelfAttention,
    out_lin: nn::Linear,
    sa_layer_norm: nn::LayerNorm,
    lin1: nn::Linear,
    activation: Activation,
    lin2: nn::Linear,
    output_layer_norm: nn::LayerNorm,
    dropout: Dropout,
}

impl Layer {
    fn new(path: &nn::Path, config: &ModelConfig, masks: &Arc<DropoutMasks>) -> Self {
        let hidden = config.hidden_size;
        let attention = path / "attention";
        let ffn = path / "ffn";
        Layer {
            attention: SelfAttention::new(&attention, ["q_lin", "k_lin", "v_lin"], config, masks),
            out_lin: linear(&attention / "out_lin", hidden, hidden, config),
            sa_layer_norm: layer_norm(path / "sa_layer_norm", config),
            lin1: linear(&ffn / "lin1", hidden, config.intermediate_size, config),
            activation: config.hidden_act,
            lin2: linear(&ffn / "lin2", config.intermediate_size, hidden, config),
            output_layer_norm: layer_norm(path / "output_layer_norm", config),
            dropout: Dropout::new(config.hidden_dropout_prob, masks),
        }
    }

    /// Every position's output, or with `first_only` the first
    /// position's alone, as BERT's layer (`super::bert`).
    fn forward_t(
        &self,
        xs: &Tensor,
        mask: Option<&Tensor>,
        train: bool,
        first_only: bool,
    ) -> Tensor {
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
        // Unlike BERT, DistilBERT has no dropout after the attention's
        // output projection, only on the attention weights and after the FFN.
        let attended = self
            .sa_layer_norm
            .forward(&(self.out_lin.forward(&context) + residual));
        let inner = self.activation.apply(&self.lin1.forward(&attended));
        let output = self.lin2.forward(&inner);
        let dropped = if first_only {
            let size = output.size();
            let whole = [size[0], xs.size()[1], size[2]];
            self.dropout.forward_first_t(&output, &whole, 1, train)
        } else {
            self.dropout.forward_t(&output, train)
        };
        self.output_layer_norm.forward(&(dropped + attended))
    }
}

#[derive(Debug)]
pub struct DistilBertForSequenceClassification {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    pre_classifier: nn::Linear,
    classifier: nn::Linear,
    classifier_dropout: Dropout,
}

impl DistilBertForSequenceClassification {
    pub fn new(
        root: &nn::Path,
        config: &ModelConfig,
        num_labels: i64,
        masks: &Arc<DropoutMasks>,
    ) -> Self {
        let distilbert = root / "distilbert";
        let layers = &distilbert / "transformer" / "layer";
        let hidden = config.hidden_size;
        DistilBertForSequenceClassification {
            embeddings: Embeddings::new(&(&distilbert / "embeddings"), config, masks),
            layers: (0..config.num_hidden_layers)
                .map(|index| Layer::new(&(&layers / index), config, masks))
                .collect(),
            pre_classifier: linear(root / "pre_classifier", hidden, hidden, config),
            classifier: linear(root / "classifier", hidden, num_labels, config),
            classifier_dropout: Dropout::new(config.classifier_dropout, masks),
        }
    }

    /// The hidden states the head reads: (batch, 1, hidden), the last
    /// layer's at the first position (see [`layer`](Self::layer)).
    pub fn encode(&self, input_ids: &Tensor, mask: Option<&Tensor>, train: bool) -> Tensor {
        let mut xs = self.embed(input_ids, train);
        for index in 0..self.layers.len() {
            xs = self.layer(index, &xs, mask, train);
        }
        xs
    }

    pub fn forward_t(&self, input_ids: &Tensor, mask: Option<&Tensor>, train: bool) -> Tensor {
        let hidden = self.encode(input_ids, mask, train);
        self.head(&hidden, train)
    }

    /// The embeddings' output, (batch, seq, hidden): the first of the
    /// pieces `forward_t` is made of, which `crate::fsdp` runs one by one.
    pub fn embed(&self, input_ids: &Tensor, train: bool) -> Tensor {
        self.embeddings.forward_t(input_ids, train)
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Transformer layer `index` on the hidden states `xs`. The last one
    /// computes the first position only, (batch, 1, hidden): the
    /// pre-classifier reads nothing else.
    pub fn layer(&self, index: usize, xs: &Tensor, mask: Option<&Tensor>, train: bool) -> Tensor {
        let last = index + 1 == self.layers.len();
        self.layers[index].forward_t(xs, mask, train, last)
    }

    /// `pre_classifier`, ReLU, dropout and the classifier on the last
    /// hidden states: logits.
    pub fn head(&self, hidden: &Tensor, train: bool) -> Tensor {
        let pooled = self.pre_classifier.forward(&hidden.select(1, 0)).relu();
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
            json!({"model_type": "distilbert", "vocab_size": 50, "dim": 16,
                                         "n_layers": 1, "n_heads": 2, "hidden_dim": 24,
                                         "max_position_embeddings": 16}),
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
