//! `DistilBertForSequenceClassification`: the encoder under `distilbert.`,
//! then on the first token `pre_classifier`, ReLU, dropout and the
//! classifier. No pooler, no token types.

use tch::nn::{self, Module};
use tch::{Kind, Tensor};

use super::config::{Activation, ModelConfig};
use super::layers::{embedding, layer_norm, linear, SelfAttention};

#[derive(Debug)]
struct Embeddings {
    word: nn::Embedding,
    position: nn::Embedding,
    norm: nn::LayerNorm,
    dropout: f64,
}

impl Embeddings {
    fn new(path: &nn::Path, config: &ModelConfig) -> Self {
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
            dropout: config.hidden_dropout_prob,
        }
    }

    fn forward_t(&self, input_ids: &Tensor, train: bool) -> Tensor {
        let seq = input_ids.size()[1];
        let positions = Tensor::arange(seq, (Kind::Int64, input_ids.device())).unsqueeze(0);
        let xs = self.word.forward(input_ids) + self.position.forward(&positions);
        self.norm.forward(&xs).dropout(self.dropout, train)
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
    dropout: f64,
}

impl Layer {
    fn new(path: &nn::Path, config: &ModelConfig) -> Self {
        let hidden = config.hidden_size;
        let attention = path / "attention";
        let ffn = path / "ffn";
        Layer {
            attention: SelfAttention::new(&attention, ["q_lin", "k_lin", "v_lin"], config),
            out_lin: linear(&attention / "out_lin", hidden, hidden, config),
            sa_layer_norm: layer_norm(path / "sa_layer_norm", config),
            lin1: linear(&ffn / "lin1", hidden, config.intermediate_size, config),
            activation: config.hidden_act,
            lin2: linear(&ffn / "lin2", config.intermediate_size, hidden, config),
            output_layer_norm: layer_norm(path / "output_layer_norm", config),
            dropout: config.hidden_dropout_prob,
        }
    }

    fn forward_t(&self, xs: &Tensor, mask: Option<&Tensor>, train: bool) -> Tensor {
        let context = self.attention.forward_t(xs, mask, train);
        // Unlike BERT, DistilBERT has no dropout after the attention's
        // output projection, only on the attention weights and after the FFN.
        let attended = self
            .sa_layer_norm
            .forward(&(self.out_lin.forward(&context) + xs));
        let inner = self.activation.apply(&self.lin1.forward(&attended));
        self.output_layer_norm
            .forward(&(self.lin2.forward(&inner).dropout(self.dropout, train) + attended))
    }
}

#[derive(Debug)]
pub struct DistilBertForSequenceClassification {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    pre_classifier: nn::Linear,
    classifier: nn::Linear,
    classifier_dropout: f64,
}

impl DistilBertForSequenceClassification {
    pub fn new(root: &nn::Path, config: &ModelConfig, num_labels: i64) -> Self {
        let distilbert = root / "distilbert";
        let layers = &distilbert / "transformer" / "layer";
        let hidden = config.hidden_size;
        DistilBertForSequenceClassification {
            embeddings: Embeddings::new(&(&distilbert / "embeddings"), config),
            layers: (0..config.num_hidden_layers)
                .map(|index| Layer::new(&(&layers / index), config))
                .collect(),
            pre_classifier: linear(root / "pre_classifier", hidden, hidden, config),
            classifier: linear(root / "classifier", hidden, num_labels, config),
            classifier_dropout: config.classifier_dropout,
        }
    }

    /// The last layer's hidden states, (batch, seq, hidden).
    pub fn encode(&self, input_ids: &Tensor, mask: Option<&Tensor>, train: bool) -> Tensor {
        let mut xs = self.embeddings.forward_t(input_ids, train);
        for layer in &self.layers {
            xs = layer.forward_t(&xs, mask, train);
        }
        xs
    }

    pub fn forward_t(&self, input_ids: &Tensor, mask: Option<&Tensor>, train: bool) -> Tensor {
        let hidden = self.encode(input_ids, mask, train);
        let pooled = self.pre_classifier.forward(&hidden.select(1, 0)).relu();
        self.classifier
            .forward(&pooled.dropout(self.classifier_dropout, train))
    }
}
