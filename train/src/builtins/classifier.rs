//! What `train/classifier@1` and `eval/classifier@1` share: the device a
//! stage runs on, the checks of a token split against the model, a batch
//! as tensors, and predicting a whole split in eval mode (train validates
//! with it every epoch; eval scores the checkpoint with it, so the two
//! agree on the same data by construction).

use std::path::Path;

use pipe_stages::batches::{to_row_order, Batch, Collator, EvalSampler};
use pipe_stages::token_file::TokenizedSplit;
use pipe_stages::{Result, StageContext, StageError};
use tch::{Device, Kind, Reduction, Tensor};

use crate::inference::InferenceModeGuard;
use crate::model::{ModelError, SequenceClassifier};
use crate::precision::{AutocastGuard, PrecisionError};

pub(super) fn precision_error(error: PrecisionError) -> StageError {
    match &error {
        PrecisionError::Unsupported { .. } => {
            StageError::param("precision", error.to_string(), error.hint())
        }
        PrecisionError::NoDevice { .. } => StageError::input(error.to_string(), error.hint()),
        PrecisionError::Autocast(_) | PrecisionError::Torch(_) => {
            StageError::Other(error.to_string())
        }
    }
}

/// A stage's context with the params the engine would hand over for
/// `with`: checked against the stage's ParamSpecs, defaults filled in; or
/// the problems the engine would report.
#[cfg(test)]
pub(super) fn checked_context(
    info: &pipe_protocol::StageInfo,
    with: serde_json::Value,
) -> std::result::Result<StageContext, Vec<String>> {
    let with = with.as_object().cloned().unwrap_or_default();
    let params = pipe_protocol::check_params(info, &with).map_err(|problems| {
        problems
            .into_iter()
            .map(|problem| problem.message)
            .collect::<Vec<_>>()
    })?;
    Ok(StageContext::new(pipe_protocol::Invocation {
        protocol: pipe_protocol::PROTOCOL_VERSION,
        stage: "stage".into(),
        uses: info.name.clone(),
        version: info.version,
        params,
        output_dir: "/out".into(),
        scratch_dir: "/scratch".into(),
        project_root: "/".into(),
        devices: vec![],
        threads: 1,
        run: None,
        resume_dir: None,
    }))
}

/// libtorch errors as stage errors, with the model's wording.
pub(super) fn torch(error: tch::TchError) -> StageError {
    ModelError::from(error).into()
}

/// The CPU when the engine gave the stage no GPU, else the first GPU it
/// gave (the engine also sets CUDA_VISIBLE_DEVICES, so that is cuda:0).
pub(super) fn device(context: &StageContext) -> Result<Device> {
    let devices = &context.invocation.devices;
    if devices.is_empty() {
        return Ok(Device::Cpu);
    }
    if devices.len() > 1 {
        return Err(StageError::param(
            "strategy",
            format!(
                "`single` uses one device, but the stage was given {} GPUs ({})",
                devices.len(),
                devices.join(", ")
            ),
            "set `resources.gpus: 1` for this stage, or `strategy: ddp` with `devices` equal to its GPUs",
        ));
    }
    if !tch::Cuda::is_available() {
        return Err(StageError::input(
            format!(
                "the stage was given GPU {} but libtorch sees no CUDA device: {}",
                devices[0],
                crate::hardware::why_no_cuda()
            ),
            "check the NVIDIA driver (nvidia-smi) and that the worker was built against a CUDA libtorch; \
             or drop `resources.gpus` to train on the CPU",
        ));
    }
    Ok(Device::Cuda(0))
}

/// Labels outside the head would be an index error inside libtorch.
pub(super) fn check_labels(split: &TokenizedSplit, num_labels: i64) -> Result<()> {
    if let Some((row, label)) = split
        .labels()
        .iter()
        .enumerate()
        .find(|(_, &label)| !(0..num_labels).contains(&label))
    {
        return Err(StageError::input(
            format!(
                "`{}` row {row} has label {label}, but the model has {num_labels} classes (0..{})",
                split.path().display(),
                num_labels - 1
            ),
            "set `num_labels` to the number of classes, and make labels 0-based class ids",
        ));
    }
    Ok(())
}

/// A row longer than the position table would fail mid-epoch; say so up
/// front, with the fix.
/// Checks that every row fits the model's positions and every token id its
/// vocabulary, on the host, once per split: the model then skips its
/// per-batch check on the device (`SequenceClassifier::vouch_for_ids`).
pub(super) fn check_lengths(split: &TokenizedSplit, model: &SequenceClassifier) -> Result<()> {
    check_ids(split, model)?;
    let positions = model.config.max_position_embeddings as usize;
    let longest = split.lengths().into_iter().max().unwrap_or(0);
    if longest > positions {
        return Err(StageError::input(
            format!(
                "`{}` has rows of {longest} tokens, but the model has only {positions} positions",
                split.path().display()
            ),
            format!("tokenize with `max_length: {positions}` or less"),
        ));
    }
    Ok(())
}

/// The pad id the collator fills with must be a row of the embedding too.
pub(super) fn check_pad_id(pad: u32, tokens: &Path, model: &SequenceClassifier) -> Result<()> {
    if i64::from(pad) >= model.config.vocab_size {
        return Err(StageError::input(
            format!(
                "the tokenizer in `{}` pads with id {pad}, outside the model's vocabulary of {}",
                tokens.display(),
                model.config.vocab_size
            ),
            "tokenize with the model's own tokenizer (`tokenizer:` the model's directory)",
        ));
    }
    Ok(())
}

fn check_ids(split: &TokenizedSplit, model: &SequenceClassifier) -> Result<()> {
    let vocabulary = model.config.vocab_size;
    let highest = (0..split.len())
        .filter_map(|row| split.sequence(row).iter().max())
        .max()
        .copied()
        .unwrap_or(0);
    if i64::from(highest) >= vocabulary {
        return Err(StageError::input(
            format!(
                "`{}` has token id {highest}, outside the model's vocabulary of {vocabulary}",
                split.path().display()
            ),
            "tokenize with the model's own tokenizer (`tokenizer:` the model's directory)",
        ));
    }
    Ok(())
}

/// A batch as (input_ids, attention_mask, labels) on `device`. No mask when
/// no row is padded: the model then skips masking, as `transformers` does
/// for an all-ones mask.
pub(super) fn batch_tensors(
    batch: &Batch,
    device: Device,
) -> Result<(Tensor, Option<Tensor>, Tensor)> {
    let shape = [batch.rows as i64, batch.seq_len as i64];
    if let Device::Cuda(_) = device {
        return batch_tensors_on_gpu(batch, device).map_err(torch);
    }
    let ids = Tensor::f_from_slice(&batch.input_ids)
        .and_then(|t| t.f_view(shape))
        .and_then(|t| t.f_to_device(device))
        .map_err(torch)?;
    let mask = if batch.real_tokens == batch.padded_tokens() {
        None
    } else {
        Some(
            Tensor::f_from_slice(&batch.attention_mask)
                .and_then(|t| t.f_view(shape))
                .and_then(|t| t.f_to_device(device))
                .map_err(torch)?,
        )
    };
    let labels = Tensor::f_from_slice(&batch.labels)
        .and_then(|t| t.f_to_device(device))
        .map_err(torch)?;
    Ok((ids, mask, labels))
}

/// [`batch_tensors`] for a GPU: ids, mask and labels in one pinned host
/// buffer and one non-blocking copy, instead of three pageable copies the
/// host waits for. The caching host allocator keeps the pinned buffer until
/// the copy is done.
///
/// Pinned with `at::_pin_memory`, not `Tensor::pin_memory`: tch's binding
/// of the latter always passes a device, an argument torch 2.x deprecates,
/// and libtorch printed two warnings per batch for it (one from
/// `pin_memory`, one from the `is_pinned` it asks first). The buffer is
/// fresh, so the `is_pinned` check has nothing to find; `_pin_memory` is
/// what `pin_memory` calls once it has asked, with the device only
/// choosing the host allocator (CUDA's), as `pin_memory()` with no
/// argument chooses it.
fn batch_tensors_on_gpu(
    batch: &Batch,
    device: Device,
) -> std::result::Result<(Tensor, Option<Tensor>, Tensor), tch::TchError> {
    let shape = [batch.rows as i64, batch.seq_len as i64];
    let positions = batch.input_ids.len() as i64;
    let masked = batch.real_tokens != batch.padded_tokens();
    let mut host = Vec::with_capacity(batch.input_ids.len() * 2 + batch.labels.len());
    host.extend_from_slice(&batch.input_ids);
    if masked {
        host.extend_from_slice(&batch.attention_mask);
    }
    host.extend_from_slice(&batch.labels);
    let on_device = Tensor::f_from_slice(&host)?
        .f_internal_pin_memory(device)?
        .f_to_device_(device, Kind::Int64, true, false)?;
    let ids = on_device.f_narrow(0, 0, positions)?.f_view(shape)?;
    let mask = if masked {
        Some(on_device.f_narrow(0, positions, positions)?.f_view(shape)?)
    } else {
        None
    };
    let labels = on_device.f_narrow(0, host.len() as i64 - batch.rows as i64, batch.rows as i64)?;
    Ok((ids, mask, labels))
}

/// Eval-mode results of a whole split, in dataset order.
pub(super) struct Predictions {
    pub rows: Vec<usize>,
    pub labels: Vec<i64>,
    pub predictions: Vec<usize>,
    pub probabilities: Vec<Vec<f32>>,
    pub loss_sum: f64,
}

impl Predictions {
    pub(super) fn mean_loss(&self) -> f64 {
        self.loss_sum / self.rows.len().max(1) as f64
    }

    pub(super) fn accuracy(&self) -> f64 {
        let correct = self
            .labels
            .iter()
            .zip(&self.predictions)
            .filter(|(&label, &predicted)| label == predicted as i64)
            .count();
        correct as f64 / self.rows.len().max(1) as f64
    }
}

/// Runs `split` through the model (`forward`: logits of ids and a mask,
/// without dropout) in the length-sorted batches of `sampler`, under
/// libtorch's inference mode, and puts the results back in dataset order.
/// `progress` hears the rows done after each batch: a split of thousands
/// of rows takes minutes on a CPU, and a stage must not go silent that
/// long.
pub(super) fn predict(
    forward: &mut dyn FnMut(&Tensor, Option<&Tensor>) -> Result<Tensor>,
    split: &TokenizedSplit,
    collator: &Collator,
    sampler: &EvalSampler,
    autocast: Option<Kind>,
    device: Device,
    progress: &mut dyn FnMut(u64),
) -> Result<Predictions> {
    let mut per_row: Vec<(i64, usize, Vec<f32>)> = Vec::with_capacity(split.len());
    let mut loss_sum = 0.0;
    for rows in sampler.batches() {
        let batch = collator.collate(split, rows)?;
        let (loss, predicted, probabilities) = {
            let _inference = InferenceModeGuard::new()
                .map_err(|problem| StageError::Other(format!("inference mode: {problem}")))?;
            let (ids, mask, labels) = batch_tensors(&batch, device)?;
            let _autocast = autocast
                .map(|kind| AutocastGuard::new(device, kind))
                .transpose()
                .map_err(precision_error)?;
            let logits = forward(&ids, mask.as_ref())?;
            let loss = logits
                .f_cross_entropy_loss::<Tensor>(&labels, None, Reduction::Sum, -100, 0.0)
                .map_err(torch)?
                .double_value(&[]);
            let probabilities = logits
                .f_softmax(-1, Kind::Float)
                .and_then(|p| p.f_to_device(Device::Cpu))
                .map_err(torch)?;
            let predicted = logits
                .f_argmax(-1, false)
                .and_then(|p| p.f_to_device(Device::Cpu))
                .map_err(torch)?;
            let predicted = Vec::<i64>::try_from(&predicted).map_err(torch)?;
            let probabilities = Vec::<Vec<f32>>::try_from(&probabilities).map_err(torch)?;
            (loss, predicted, probabilities)
        };
        loss_sum += loss;
        for ((label, predicted), probabilities) in
            batch.labels.iter().zip(predicted).zip(probabilities)
        {
            per_row.push((*label, predicted as usize, probabilities));
        }
        progress(per_row.len() as u64);
    }
    let ordered = to_row_order(&sampler.order(), per_row)?;
    let mut result = Predictions {
        rows: Vec::with_capacity(ordered.len()),
        labels: Vec::with_capacity(ordered.len()),
        predictions: Vec::with_capacity(ordered.len()),
        probabilities: Vec::with_capacity(ordered.len()),
        loss_sum,
    };
    for (row, (label, predicted, probabilities)) in ordered {
        result.rows.push(row);
        result.labels.push(label);
        result.predictions.push(predicted);
        result.probabilities.push(probabilities);
    }
    Ok(result)
}
