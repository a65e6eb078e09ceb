//! `eval/classifier@1`: runs a checkpoint written by `train/classifier@1`
//! (or any complete Hugging Face BERT/DistilBERT sequence classifier) over
//! one tokenized split, writes a prediction per row in dataset order and
//! scores them as scikit-learn does (`classification_report`).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use pipe_protocol::{OutputKind, ParamKind, ParamSpec};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use pipe_stages::batches::{pad_id, Collator, EvalSampler};
use pipe_stages::classification::classification_report;
use pipe_stages::token_file::{open_split, TOKENIZER_FILE};
use pipe_stages::{BuiltinStage, Result, StageContext, StageError, StageInfo, StageInfoBuilder};

use super::classifier::{check_labels, check_lengths, check_pad_id, device, predict};
use crate::model::SequenceClassifier;

pub struct EvalClassifier;

/// The stage's params, one field per `ParamSpec` (ranges checked by the
/// engine at load).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EvalParams {
    checkpoint: PathBuf,
    tokens: PathBuf,
    split: String,
    batch_size: usize,
}

const PREDICTIONS: &str = "predictions";

impl BuiltinStage for EvalClassifier {
    fn info(&self) -> StageInfo {
        StageInfoBuilder::new(
            "eval/classifier",
            1,
            "Score a sequence classifier checkpoint on a tokenized split: accuracy, precision, recall, F1, predictions",
        )
        // 2: fused QKV projection (float rounding of the logits).
        .implementation(2)
        .params([
            ParamSpec::new(
                "checkpoint",
                ParamKind::Path,
                None,
                "the checkpoint output of train/classifier@1 (a directory with config.json and model.safetensors)",
            ),
            ParamSpec::new(
                "tokens",
                ParamKind::Path,
                None,
                "the output of text/tokenize@1 holding the split to score",
            ),
            ParamSpec::new("split", ParamKind::String, Some(json!("test")), "the split to score (NAME.safetensors in `tokens`)"),
            ParamSpec::new(
                "batch_size",
                ParamKind::Integer,
                Some(json!(64)),
                "rows per batch (memory only: results do not depend on it beyond float rounding)",
            )
            .at_least(1.0),
        ])
        .output(
            PREDICTIONS,
            OutputKind::File,
            "JSONL in dataset order: {\"row\", \"label\", \"prediction\", \"probabilities\"}",
        )
        .metrics([
            "split",
            "rows",
            "accuracy",
            "precision",
            "recall",
            "f1",
            "loss",
            "macro.precision",
            "macro.recall",
            "macro.f1",
            "per_class.<class>.precision",
            "per_class.<class>.recall",
            "per_class.<class>.f1",
            "per_class.<class>.support",
            "confusion",
        ])
        .detail_metrics(&["confusion", "per_class"])
        .key_metrics(&["accuracy", "f1", "loss"])
        .build()
    }

    fn run(&self, context: &StageContext) -> Result<()> {
        let EvalParams {
            checkpoint,
            tokens,
            split: split_name,
            batch_size,
        } = context.params()?;
        let checkpoint = checkpoint_dir(&checkpoint)?;
        let split_name = split_name.as_str();
        let device = device(context)?;
        tch::set_num_threads(context.threads() as i32);

        let split = open_split(&tokens, split_name)?;
        let (model, report) = SequenceClassifier::from_pretrained(&checkpoint, None, device)?;
        if !report.missing.is_empty() {
            return Err(StageError::input(
                format!(
                    "checkpoint `{}` lacks {} tensors, e.g. `{}`: it is not a trained classifier",
                    checkpoint.display(),
                    report.missing.len(),
                    report.missing[0]
                ),
                "evaluate the checkpoint output of train/classifier@1",
            ));
        }
        let num_labels = model.num_labels();
        check_labels(&split, num_labels)?;
        check_lengths(&split, &model)?;
        let pad = pad_id(&tokens.join(TOKENIZER_FILE))?;
        check_pad_id(pad, &tokens, &model)?;
        model.vouch_for_ids();
        let collator = Collator::new(pad);

        let phase = format!("eval {split_name}");
        let total = split.len() as u64;
        context.progress(&phase, 0, Some(total), "rows");
        // In fp32 always: the variables are fp32 whatever the file holds
        // (a bf16 or fp16 checkpoint is upcast on load, exactly), and the
        // train stage writes fp32 checkpoints at every precision.
        let results = predict(
            &mut |ids, mask| Ok(model.forward_t(ids, mask, None, false)?),
            &split,
            &collator,
            &EvalSampler::new(&split.lengths(), batch_size)?,
            None,
            device,
            &mut |done| context.progress(&phase, done, Some(total), "rows"),
        )?;
        context.progress_done(&phase, total, "rows");

        let path = context.output(PREDICTIONS);
        let io = |e| StageError::io(&path, e);
        let mut out = BufWriter::new(File::create(&path).map_err(io)?);
        for (index, &row) in results.rows.iter().enumerate() {
            let line = json!({
                "row": row,
                "label": results.labels[index],
                "prediction": results.predictions[index],
                "probabilities": results.probabilities[index],
            });
            writeln!(out, "{line}").map_err(io)?;
        }
        out.flush().map_err(io)?;

        let labels: Vec<usize> = results.labels.iter().map(|&l| l as usize).collect();
        let report = classification_report(&labels, &results.predictions, num_labels as usize)?;
        // The headline scores: class 1's for two classes (what sentiment
        // papers quote), the macro average otherwise.
        let (precision, recall, f1) = match &report.binary {
            Some(binary) => (binary.precision, binary.recall, binary.f1),
            None => (report.macro_precision, report.macro_recall, report.macro_f1),
        };
        let per_class: Map<String, Value> = report
            .per_class
            .iter()
            .map(|scores| {
                (
                    scores.class.to_string(),
                    json!({
                        "precision": scores.precision,
                        "recall": scores.recall,
                        "f1": scores.f1,
                        "support": scores.support,
                    }),
                )
            })
            .collect();
        context.message(format!(
            "{split_name}: {} rows, accuracy {:.4}, precision {precision:.4}, recall {recall:.4}, F1 {f1:.4}",
            report.rows, report.accuracy
        ));
        context.write_metrics(&json!({
            "split": split_name,
            "rows": report.rows,
            "accuracy": report.accuracy,
            "precision": precision,
            "recall": recall,
            "f1": f1,
            "loss": results.mean_loss(),
            "macro": {
                "precision": report.macro_precision,
                "recall": report.macro_recall,
                "f1": report.macro_f1,
            },
            "per_class": per_class,
            "confusion": report.confusion,
        }))?;
        Ok(())
    }
}

/// The checkpoint directory itself, or its `checkpoint/` when given the
/// whole output directory of a train stage.
fn checkpoint_dir(path: &Path) -> Result<PathBuf> {
    for dir in [path.to_path_buf(), path.join("checkpoint")] {
        if dir.join("config.json").is_file() && dir.join("model.safetensors").is_file() {
            return Ok(dir);
        }
    }
    Err(StageError::input(
        format!(
            "`{}` is not a checkpoint: no config.json and model.safetensors",
            path.display()
        ),
        "set `checkpoint: ${stages.TRAIN.outs.checkpoint}`, the output of train/classifier@1",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtins::classifier::checked_context;
    use serde_json::json;

    #[test]
    fn the_params_deserialize_with_their_defaults_and_batch_size_has_a_floor() {
        let info = EvalClassifier.info();
        let context = checked_context(&info, json!({"checkpoint": "/c", "tokens": "/t"})).unwrap();
        let params: EvalParams = context.params().unwrap();
        assert_eq!(params.checkpoint, PathBuf::from("/c"));
        assert_eq!((params.split.as_str(), params.batch_size), ("test", 64));
        let refused = checked_context(
            &info,
            json!({"checkpoint": "/c", "tokens": "/t", "batch_size": 0}),
        );
        assert_eq!(
            refused.err().unwrap_or_default(),
            ["param `batch_size` must be at least 1, not 0"]
        );
    }
}
