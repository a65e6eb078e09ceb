//! The model as a chain of units, run one at a time: what full sharding
//! (`crate::fsdp`) needs to gather one unit's parameters, run it and free
//! them again, and to recompute a unit's forward in backward.
//!
//! The units are FSDP's usual wrapping of a transformer: the embeddings,
//! each encoder layer, and the head (BERT's pooler and classifier,
//! DistilBERT's pre-classifier and classifier). Running them in order is
//! `forward_t`, operation for operation: the same kernels, the same
//! dropout masks in the same order.

use std::sync::atomic::Ordering;

use tch::{Device, Kind, Tensor};

use super::classifier::{Net, SequenceClassifier};
use super::error::ModelError;

/// A batch checked and prepared once ([`SequenceClassifier::prepare`]) for
/// the units that read it: the ids (embeddings) and the attention mask as
/// the layers take it.
#[derive(Debug)]
pub struct ModelInput {
    pub(super) ids: Tensor,
    pub(super) token_types: Option<Tensor>,
    /// Boolean (batch, 1, 1, seq), true where a key may be attended to.
    pub(super) mask: Option<Tensor>,
}

/// Where dropout's random draws stand: the count of CPU masks drawn (see
/// `DropoutMasks`) and, on a GPU, the state of its generator (libtorch's
/// dropout and fused attention draw from it). Restoring it before a
/// recomputed forward draws that forward's masks again, as
/// `torch.utils.checkpoint(preserve_rng_state=True)` does.
#[derive(Debug)]
pub struct DropoutState {
    drawn: u64,
    cuda: Option<(usize, Tensor)>,
}

impl DropoutState {
    /// A state saved by a run that was interrupted: the CPU masks drawn and,
    /// on a GPU, its generator's state (a CPU uint8 tensor).
    pub fn new(drawn: u64, cuda: Option<(usize, Tensor)>) -> DropoutState {
        DropoutState { drawn, cuda }
    }

    pub fn drawn(&self) -> u64 {
        self.drawn
    }

    /// The GPU's index and its generator's state, on a GPU.
    pub fn cuda(&self) -> Option<(usize, &Tensor)> {
        self.cuda.as_ref().map(|(index, state)| (*index, state))
    }
}

extern "C" {
    fn pipe_cuda_rng_get_state(
        index: std::ffi::c_int,
        out: *mut std::ffi::c_void,
        error: *mut std::ffi::c_char,
        error_size: usize,
    ) -> std::ffi::c_int;
    fn pipe_cuda_rng_set_state(
        index: std::ffi::c_int,
        state: *mut std::ffi::c_void,
        error: *mut std::ffi::c_char,
        error_size: usize,
    ) -> std::ffi::c_int;
}

fn cuda_rng(
    index: usize,
    tensor: &Tensor,
    call: unsafe extern "C" fn(
        std::ffi::c_int,
        *mut std::ffi::c_void,
        *mut std::ffi::c_char,
        usize,
    ) -> std::ffi::c_int,
) -> Result<(), ModelError> {
    // SAFETY: a live tensor handle (the shim assigns the state to it, or
    // reads it) and the helper's buffer; the shim locks the generator and
    // reports C++ exceptions through the buffer.
    crate::ffi::call_shim(|error, size| unsafe {
        call(
            index as std::ffi::c_int,
            tensor.as_ptr() as *mut std::ffi::c_void,
            error,
            size,
        )
    })
    .map_err(|message| ModelError::Input(format!("the RNG state of cuda:{index}: {message}")))
}

impl SequenceClassifier {
    /// Units: the embeddings, each layer, the head.
    pub fn unit_count(&self) -> usize {
        let layers = match &self.net {
            Net::Bert(net) => net.num_layers(),
            Net::DistilBert(net) => net.num_layers(),
        };
        layers + 2
    }

    /// The unit a variable of the store belongs to, by its HF name:
    /// `<model>.embeddings.*` is unit 0, layer `i` (`bert.encoder.layer.i.*`,
    /// `distilbert.transformer.layer.i.*`) unit `i + 1`, anything else (the
    /// pooler or pre-classifier, the classifier) the head, the last.
    pub fn unit_of(&self, name: &str) -> usize {
        let (embeddings, layers) = match &self.net {
            Net::Bert(_) => ("bert.embeddings.", "bert.encoder.layer."),
            Net::DistilBert(_) => ("distilbert.embeddings.", "distilbert.transformer.layer."),
        };
        let head = self.unit_count() - 1;
        if name.starts_with(embeddings) {
            return 0;
        }
        name.strip_prefix(layers)
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(index, _)| index.parse::<usize>().ok())
            .filter(|&index| index + 1 < head)
            .map_or(head, |index| index + 1)
    }

    /// Runs one unit: the embeddings on `input`'s ids (`hidden` unused),
    /// a layer on `hidden`, or the head on `hidden`, giving logits. Units
    /// run in order from 0 are `forward_t` on `input`.
    pub fn forward_unit(
        &self,
        unit: usize,
        input: &ModelInput,
        hidden: Option<&Tensor>,
        train: bool,
    ) -> Result<Tensor, ModelError> {
        let head = self.unit_count() - 1;
        if unit > head {
            return Err(ModelError::Input(format!(
                "unit {unit} of a model of {} units",
                head + 1
            )));
        }
        if unit == 0 {
            return Ok(match &self.net {
                Net::Bert(net) => net.embed(&input.ids, input.token_types.as_ref(), train),
                Net::DistilBert(net) => net.embed(&input.ids, train),
            });
        }
        let Some(hidden) = hidden else {
            return Err(ModelError::Input(format!(
                "unit {unit} runs on the hidden states of the unit before it"
            )));
        };
        Ok(match (&self.net, unit == head) {
            (Net::Bert(net), true) => net.head(hidden, train),
            (Net::DistilBert(net), true) => net.head(hidden, train),
            (Net::Bert(net), false) => net.layer(unit - 1, hidden, input.mask.as_ref(), train),
            (Net::DistilBert(net), false) => {
                net.layer(unit - 1, hidden, input.mask.as_ref(), train)
            }
        })
    }

    /// Where dropout's draws stand now (see [`DropoutState`]).
    pub fn dropout_state(&self) -> Result<DropoutState, ModelError> {
        let cuda = match self.vs.device() {
            Device::Cuda(index) => {
                let state = Tensor::f_empty([0], (Kind::Uint8, Device::Cpu))?;
                cuda_rng(index, &state, pipe_cuda_rng_get_state)?;
                Some((index, state))
            }
            _ => None,
        };
        Ok(DropoutState {
            drawn: self.masks.drawn(),
            cuda,
        })
    }

    /// Puts dropout's draws back where `state` was taken.
    pub fn restore_dropout_state(&self, state: &DropoutState) -> Result<(), ModelError> {
        self.masks.rewind(state.drawn);
        if let Some((index, tensor)) = &state.cuda {
            cuda_rng(*index, tensor, pipe_cuda_rng_set_state)?;
        }
        Ok(())
    }
}

impl SequenceClassifier {
    /// Checks a batch as [`SequenceClassifier::forward_t`] takes it and
    /// turns the attention mask into the boolean (batch, 1, 1, seq) the
    /// layers use: what both `forward_t` and the unit-by-unit forward of
    /// [`SequenceClassifier::forward_unit`] start from.
    pub fn prepare(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        token_type_ids: Option<&Tensor>,
    ) -> Result<ModelInput, ModelError> {
        let size = input_ids.size();
        let [batch, seq] = size[..] else {
            return Err(ModelError::Input(format!(
                "input_ids must be (batch, seq), got shape {size:?}"
            )));
        };
        if batch == 0 || seq == 0 {
            return Err(ModelError::Input(format!("empty batch of shape {size:?}")));
        }
        if input_ids.kind() != Kind::Int64 {
            return Err(ModelError::Input(format!(
                "input_ids must be int64, got {:?}",
                input_ids.kind()
            )));
        }
        if seq > self.config.max_position_embeddings {
            return Err(ModelError::Input(format!(
                "sequence length {seq} is more than the model's {} positions",
                self.config.max_position_embeddings
            )));
        }
        // An id past the table is an index error deep in libtorch otherwise,
        // which tch turns into a panic. Two reductions are cheap on the CPU;
        // on a GPU each is a sync with the host, so a caller that checked
        // its ids on the host says so instead.
        let vouched = self.ids_vouched.load(Ordering::Relaxed);
        let (lowest, highest) = if vouched {
            (0, 0)
        } else {
            (
                input_ids.f_min()?.int64_value(&[]),
                input_ids.f_max()?.int64_value(&[]),
            )
        };
        if lowest < 0 || highest >= self.config.vocab_size {
            return Err(ModelError::Input(format!(
                "token ids span {lowest}..={highest}, outside the vocabulary of {}",
                self.config.vocab_size
            )));
        }
        for (name, tensor) in [
            ("attention_mask", attention_mask),
            ("token_type_ids", token_type_ids),
        ] {
            if let Some(tensor) = tensor {
                if tensor.size() != size {
                    return Err(ModelError::Input(format!(
                        "{name} has shape {:?}, input_ids {size:?}",
                        tensor.size()
                    )));
                }
            }
        }
        let mask = match attention_mask {
            Some(mask) => Some(mask.f_ne(0)?.view([batch, 1, 1, seq])),
            None => None,
        };
        if let Some(types) = token_type_ids {
            match &self.net {
                Net::Bert(_) => {
                    let highest = types.f_max()?.int64_value(&[]);
                    if types.f_min()?.int64_value(&[]) < 0 || highest >= self.config.type_vocab_size
                    {
                        return Err(ModelError::Input(format!(
                            "token type ids outside 0..{}",
                            self.config.type_vocab_size
                        )));
                    }
                }
                Net::DistilBert(_) => {
                    return Err(ModelError::Input(
                        "DistilBERT has no token type embeddings".to_string(),
                    ));
                }
            }
        }
        Ok(ModelInput {
            ids: input_ids.shallow_clone(),
            token_types: token_type_ids.map(Tensor::shallow_clone),
            mask,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tch::{Device, Kind, Tensor};

    use super::super::{ModelConfig, SequenceClassifier};

    fn tiny(model_type: &str) -> SequenceClassifier {
        let config = match model_type {
            "bert" => json!({"model_type": "bert", "vocab_size": 50, "hidden_size": 16,
                             "num_hidden_layers": 3, "num_attention_heads": 2,
                             "intermediate_size": 24, "max_position_embeddings": 16}),
            _ => json!({"model_type": "distilbert", "vocab_size": 50, "dim": 16, "n_layers": 3,
                        "n_heads": 2, "hidden_dim": 24, "max_position_embeddings": 16}),
        };
        let config = ModelConfig::from_json(config).unwrap();
        SequenceClassifier::new(config, 3, Device::Cpu).unwrap()
    }

    fn batch() -> (Tensor, Tensor) {
        let ids = Tensor::from_slice(&[5i64, 9, 12, 3, 0, 0, 7, 8, 22, 31, 4, 2]).view([2, 6]);
        let mask = ids.ne(0).to_kind(Kind::Int64);
        (ids, mask)
    }

    /// The units, one after another, on the same masks.
    fn chained(model: &SequenceClassifier, ids: &Tensor, mask: &Tensor, train: bool) -> Tensor {
        let input = model.prepare(ids, Some(mask), None).unwrap();
        let mut hidden: Option<Tensor> = None;
        for unit in 0..model.unit_count() {
            hidden = Some(
                model
                    .forward_unit(unit, &input, hidden.as_ref(), train)
                    .unwrap(),
            );
        }
        hidden.unwrap()
    }

    #[test]
    fn the_units_in_order_are_forward_t_bit_for_bit_dropout_included() {
        for model_type in ["bert", "distilbert"] {
            let model = tiny(model_type);
            let (ids, mask) = batch();
            for train in [false, true] {
                model.seed_dropout(7).unwrap();
                let whole = model.forward_t(&ids, Some(&mask), None, train).unwrap();
                model.seed_dropout(7).unwrap();
                let units = chained(&model, &ids, &mask, train);
                assert_eq!(units.size(), [2, 3]);
                assert!(whole.equal(&units), "{model_type}, train {train}");
            }
        }
    }

    #[test]
    fn a_restored_dropout_state_draws_the_same_masks_again() {
        let model = tiny("bert");
        let (ids, mask) = batch();
        let input = model.prepare(&ids, Some(&mask), None).unwrap();
        model.seed_dropout(3).unwrap();
        let hidden = model.forward_unit(0, &input, None, true).unwrap();
        let state = model.dropout_state().unwrap();
        let first = model.forward_unit(1, &input, Some(&hidden), true).unwrap();
        let fresh = model.forward_unit(1, &input, Some(&hidden), true).unwrap();
        assert!(!first.equal(&fresh), "the next forward draws new masks");
        model.restore_dropout_state(&state).unwrap();
        let again = model.forward_unit(1, &input, Some(&hidden), true).unwrap();
        assert!(first.equal(&again), "the restored state, the first masks");
    }

    #[test]
    fn every_variable_is_in_one_unit_the_embeddings_layers_and_head_apart() {
        for (model_type, layer_prefix, head) in [
            (
                "bert",
                "bert.encoder.layer.",
                ["bert.pooler.", "classifier."],
            ),
            (
                "distilbert",
                "distilbert.transformer.layer.",
                ["pre_classifier.", "classifier."],
            ),
        ] {
            let model = tiny(model_type);
            assert_eq!(model.unit_count(), 5);
            let mut counts = [0usize; 5];
            for name in model.vs.variables().keys() {
                let unit = model.unit_of(name);
                counts[unit] += 1;
                let expected = if name.starts_with(&format!("{model_type}.embeddings.")) {
                    0
                } else if let Some(rest) = name.strip_prefix(layer_prefix) {
                    rest.split('.').next().unwrap().parse::<usize>().unwrap() + 1
                } else {
                    assert!(head.iter().any(|prefix| name.starts_with(prefix)), "{name}");
                    4
                };
                assert_eq!(unit, expected, "{name}");
            }
            assert!(
                counts.iter().all(|&count| count > 0),
                "{model_type}: {counts:?}"
            );
            assert_eq!(counts[1], counts[3], "layers alike");
        }
        assert_eq!(
            tiny("bert").unit_of("bert.encoder.layer.9.output.dense.weight"),
            4
        );
    }
}
