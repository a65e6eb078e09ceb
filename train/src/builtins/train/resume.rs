//! Resuming an interrupted training from its last complete epoch, as
//! Lightning's `fit(ckpt_path="last")` does, into the resume directory the
//! engine keeps for the stage's key (`Invocation::resume_dir`).
//!
//! After every epoch that another follows (its steps, its validation, its
//! figures) the replicas save what the epochs after it depend on, into
//! `epoch-N/`; after the last (or the one early stopping ends with) the
//! outputs follow at once, and a run killed while writing them trains
//! that epoch again:
//!
//! - `rank-R.safetensors`, one per replica: its optimizer's parameters and
//!   AdamW state (under `single` and `ddp`, where every replica holds the
//!   same, rank 0's alone), its dropout's position (the CPU masks drawn, a
//!   GPU's generator state) and the memory it measured;
//! - `progress.json`, from rank 0: the epochs' figures, the steps' curve,
//!   the step count, the loss scaler, the time so far;
//! - `best.safetensors`, from rank 0: the best epoch's weights, the
//!   checkpoint's `model.safetensors` as that epoch wrote it (a hard link
//!   when it can be), whose blake3 `progress.json` keeps.
//!
//! The batches need nothing: each epoch's order is drawn from the seed and
//! the epoch's number. A state is written into `.epoch-N.partial/` and
//! renamed once every replica wrote its part; older states are removed
//! after. On start, the newest state is read back, checked against this
//! run (the key already fixes params, inputs and implementation; the
//! replicas' count, the files' digests and every tensor's shape are
//! checked too) and used only if every replica's part is sound: anything
//! else is a warning and a fresh start, never a failure. A resumed run
//! computes what the uninterrupted one would have, bit for bit on the CPU;
//! only the times differ.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use pipe_stages::{Result, StageContext, StageError};

use super::super::classifier::torch;
use super::checkpoint::SavedTensor;
use super::curves::StepLine;
use super::errors::{collective_error, strategy_error};

use super::metrics::EpochStats;
use super::names::{CHECKPOINT, WEIGHTS_FILE};
use super::params::{Strategy, TrainParams};
use super::phases::PhaseTimes;
use super::replica::Replica;
use super::resume_files::{
    bits, file_digest, read_checked, read_tensors, weights_header, write_checked, write_tensors,
    PROGRESS_LIMIT,
};
use super::weights_file::{dtype_of, saved_kind};
use crate::collective::Collective;
use crate::model::{DropoutState, SequenceClassifier};
use crate::strategy::MemoryUse;

const EPOCH_PREFIX: &str = "epoch-";
const PROGRESS: &str = "progress.json";
const BEST: &str = "best.safetensors";

fn rank_file(rank: usize) -> String {
    format!("rank-{rank}.safetensors")
}

/// What rank 0 saves of the run so far; every replica reads it back.
#[derive(Serialize, Deserialize)]
struct Progress {
    epochs_done: u64,
    epochs: u64,
    world: usize,
    strategy: String,
    precision: String,
    global_step: u64,
    /// The training loop's time so far.
    #[serde(with = "bits")]
    loop_seconds: f64,
    stats: Vec<EpochStats>,
    steps: Vec<StepLine>,
    /// The loss scaler's (16-mixed): scale (bits), good steps, skipped.
    scaler: Option<(u64, u32, u64)>,
    /// Rank 0's timed steps and seconds per phase (bits).
    phase_steps: u64,
    phase_seconds: Vec<u64>,
    /// The best epoch, whose weights are in `best.safetensors`.
    best: BestFile,
}

/// The best epoch so far and the blake3 of `best.safetensors`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
struct BestFile {
    epoch: u32,
    digest: String,
}

/// What the epochs loop continues from.
pub(super) struct Resumed {
    pub(super) epochs_done: u64,
    pub(super) global_step: u64,
    pub(super) loop_seconds: f64,
    pub(super) stats: Vec<EpochStats>,
    pub(super) steps: Vec<StepLine>,
    /// Whether the checkpoint's weights file now holds the best epoch's
    /// weights (rank 0's, put back from the state).
    pub(super) best_restored: bool,
}

/// What the loop hands over after an epoch.
pub(super) struct EpochEnd<'a> {
    pub(super) epochs_done: u64,
    pub(super) global_step: u64,
    pub(super) loop_seconds: f64,
    pub(super) stats: &'a [EpochStats],
    pub(super) steps: &'a [StepLine],
    /// The best epoch so far and, on rank 0, the file of its weights.
    pub(super) best_epoch: u32,
    pub(super) best_file: Option<PathBuf>,
}

/// A state found on disk and sound as far as this replica can tell
/// before its optimizer exists.
pub(super) struct Found {
    epoch: u64,
    progress: Progress,
    /// This replica's file, and rank 0's where it holds the optimizer.
    mine: HashMap<String, SavedTensor>,
    optimizer: Option<HashMap<String, SavedTensor>>,
    /// Rank 0's: the state's `best.safetensors`, checked.
    best: Option<PathBuf>,
}

/// One replica's side of saving and resuming.
pub(super) struct Resume<'a> {
    dir: PathBuf,
    context: &'a StageContext,
    settings: &'a TrainParams,
    rank: usize,
    world: usize,
    steps_per_epoch: u64,
    /// Under `single` and `ddp` every replica's optimizer is rank 0's.
    replicated: bool,
    /// The most bytes a tensor file of this model may hold.
    limit: u64,
    /// The last state saved or resumed from, and the best epoch its
    /// `best.safetensors` holds: the next state links to it, not rewrites.
    last: Option<(PathBuf, BestFile)>,
}

impl<'a> Resume<'a> {
    /// None without a resume directory (an engine older than it, or a
    /// worker run by hand).
    pub(super) fn new(
        context: &'a StageContext,
        settings: &'a TrainParams,
        model: &SequenceClassifier,
        rank: usize,
        world: usize,
        steps_per_epoch: u64,
    ) -> Option<Resume<'a>> {
        let dir = context.resume_dir()?.to_path_buf();
        let fp32_bytes: u64 = model
            .vs
            .variables()
            .values()
            .map(|tensor| tensor.numel() as u64 * 4)
            .sum();
        Some(Resume {
            dir,
            context,
            settings,
            rank,
            world,
            steps_per_epoch,
            replicated: matches!(settings.strategy, Strategy::Single | Strategy::Ddp),
            // Parameters and two moments at most fp32 each, headers.
            limit: 3 * fp32_bytes + (64 << 20),
            last: None,
        })
    }

    fn lead(&self) -> bool {
        self.rank == 0
    }

    fn warn(&self, text: String) {
        self.context.message(format!("warning: {text}"));
    }

    /// The newest state in the directory, read and checked as far as the
    /// model allows, or None (with a warning if one was there but unsound).
    pub(super) fn find(&self, model: &SequenceClassifier) -> Option<Found> {
        let epoch = newest_state(&self.dir)?;
        match self.read(epoch, model) {
            Ok(found) => Some(found),
            Err(problem) => {
                self.warn(format!(
                    "ignoring the resume state of epoch {epoch} ({problem}); training starts over"
                ));
                None
            }
        }
    }

    fn read(&self, epoch: u64, model: &SequenceClassifier) -> std::result::Result<Found, String> {
        let dir = self.dir.join(format!("{EPOCH_PREFIX}{epoch}"));
        let text = read_checked(&dir.join(PROGRESS), PROGRESS_LIMIT)?;
        let progress: Progress =
            serde_json::from_str(&text).map_err(|e| format!("its progress does not parse: {e}"))?;
        self.check_progress(&progress, epoch)?;
        let mine = read_tensors(&dir.join(rank_file(self.rank)), self.limit)?;
        let optimizer = if self.replicated && self.rank != 0 {
            Some(read_tensors(&dir.join(rank_file(0)), self.limit)?)
        } else {
            None
        };
        let best = if self.lead() {
            let path = dir.join(BEST);
            check_best(&path, &progress.best, model, self.limit)?;
            Some(path)
        } else {
            None
        };
        Ok(Found {
            epoch,
            progress,
            mine,
            optimizer,
            best,
        })
    }

    /// The state is of this run: its replicas, its epochs, its schedule.
    fn check_progress(&self, progress: &Progress, epoch: u64) -> std::result::Result<(), String> {
        let settings = self.settings;
        let expected = (
            epoch,
            settings.epochs,
            self.world,
            settings.strategy.name(),
            settings.precision.name(),
            epoch * self.steps_per_epoch,
        );
        let found = (
            progress.epochs_done,
            progress.epochs,
            progress.world,
            progress.strategy.as_str(),
            progress.precision.as_str(),
            progress.global_step,
        );
        if found != expected {
            return Err(format!(
                "it is of epoch {} of {}, {} replicas, {} at {}, step {}; this run is epoch {} of {}, {} replicas, {} at {}, step {}",
                found.0, found.1, found.2, found.3, found.4, found.5,
                expected.0, expected.1, expected.2, expected.3, expected.4, expected.5,
            ));
        }
        let numbered = progress
            .stats
            .iter()
            .enumerate()
            .all(|(index, stats)| stats.epoch == index as u64 + 1);
        let steps_fit = progress
            .steps
            .iter()
            .all(|line| line.epoch <= epoch && line.step <= progress.global_step);
        if progress.stats.len() as u64 != epoch
            || !numbered
            || !steps_fit
            || progress.phase_seconds.len() != 5
            // A state is written only when another epoch follows.
            || epoch >= settings.epochs
        {
            return Err("its figures do not add up to its epochs".into());
        }
        Ok(())
    }

    /// Puts `found` into this replica if every replica found a sound state
    /// of the same epoch; otherwise all start over. Every replica calls it
    /// (it is collective); only the collectives and libtorch fail it.
    pub(super) fn restore(
        &mut self,
        found: Option<Found>,
        replica: &mut Replica,
        collective: &dyn Collective,
    ) -> Result<Option<Resumed>> {
        let plan = match found.map(|found| self.plan(found, replica)) {
            Some(Ok(plan)) => Some(plan),
            Some(Err(problem)) => {
                self.warn(format!(
                    "ignoring the resume state ({problem}); training starts over"
                ));
                None
            }
            None => None,
        };
        let (agreed, any) = agree(collective, plan.as_ref().map(|plan| plan.found.epoch))?;
        let Some(plan) = plan.filter(|_| agreed) else {
            if self.lead() && any && !agreed {
                self.warn(
                    "another replica's resume state is unusable; training starts over".into(),
                );
            }
            return Ok(None);
        };
        self.apply(plan, replica, collective).map(Some)
    }

    /// The tensors of `found` checked against this replica's optimizer and
    /// device, ready to apply.
    fn plan(&self, found: Found, replica: &Replica) -> std::result::Result<Plan, String> {
        let source = found.optimizer.as_ref().unwrap_or(&found.mine);
        let layout = replica.strategy.optimizer().slot_layout();
        let mut slots = Vec::with_capacity(layout.len());
        for (index, (size, kind)) in layout.iter().enumerate() {
            let get = |part: &str| -> std::result::Result<Option<Tensor>, String> {
                source
                    .get(&format!("slot.{index}.{part}"))
                    .map(|saved| saved.to_tensor().map_err(|e| e.to_string()))
                    .transpose()
            };
            let param = get("param")?.ok_or_else(|| format!("parameter {index} is missing"))?;
            let state = match (get("exp_avg")?, get("exp_avg_sq")?, get("step")?) {
                (Some(m), Some(v), Some(step)) => Some([m, v, step]),
                (None, None, None) => None,
                _ => return Err(format!("parameter {index}'s AdamW state is partial")),
            };
            let fits = |t: &Tensor| t.size() == *size && t.kind() == *kind;
            let state_fits = state
                .as_ref()
                .is_none_or(|[m, v, step]| fits(m) && fits(v) && step.numel() == 1);
            if !fits(&param) || !state_fits {
                return Err(format!("parameter {index} does not fit this model"));
            }
            slots.push((param, state));
        }
        let saved_slots = source
            .keys()
            .filter(|name| name.starts_with("slot."))
            .count();
        let expected: usize = slots
            .iter()
            .map(|(_, state)| if state.is_some() { 4 } else { 1 })
            .sum();
        if saved_slots != expected {
            return Err("it holds parameters this model does not have".into());
        }
        let dropout = dropout_of(&found.mine, replica)?;
        let memory = integers(&found.mine, "memory", 5)?;
        if found.progress.scaler.is_some() != replica.scaler.is_some() {
            return Err("its loss scaler does not fit this precision".into());
        }
        Ok(Plan {
            found,
            slots,
            dropout,
            memory,
        })
    }

    fn apply(
        &mut self,
        plan: Plan,
        replica: &mut Replica,
        collective: &dyn Collective,
    ) -> Result<Resumed> {
        let Plan {
            found,
            slots,
            dropout,
            memory,
        } = plan;
        let strategy = &mut replica.strategy;
        strategy
            .optimizer_mut()
            .restore(&slots)
            .map_err(|e| strategy_error(e.into()))?;
        drop(slots);
        strategy
            .parameters_restored(collective)
            .map_err(strategy_error)?;
        replica.model.restore_dropout_state(&dropout)?;
        let progress = found.progress;
        if let (Some(scaler), Some((scale, good, skipped))) = (&mut replica.scaler, progress.scaler)
        {
            scaler.restore((f64::from_bits(scale), good, skipped));
        }
        if memory[4] == 1 {
            replica.memory = Some(MemoryUse {
                params_bytes: memory[0] as usize,
                grads_bytes: memory[1] as usize,
                optimizer_bytes: memory[2] as usize,
            });
            replica.restored_peak_bytes = Some(memory[3] as usize);
        }
        if self.lead() {
            replica.phases = PhaseTimes {
                steps: progress.phase_steps,
                seconds: std::array::from_fn(|i| f64::from_bits(progress.phase_seconds[i])),
            };
        }
        let best_restored = match &found.best {
            Some(best) => {
                self.put_back_best(best, &progress.best)?;
                true
            }
            None => false,
        };
        let epoch = found.epoch;
        self.last = Some((
            self.dir.join(format!("{EPOCH_PREFIX}{epoch}")),
            progress.best.clone(),
        ));
        if self.lead() {
            self.context.message(format!(
                "resuming from epoch {epoch} of {} (state from an interrupted run)",
                self.settings.epochs
            ));
        }
        Ok(Resumed {
            epochs_done: epoch,
            global_step: progress.global_step,
            loop_seconds: progress.loop_seconds,
            stats: progress.stats,
            steps: progress.steps,
            best_restored,
        })
    }

    /// Saves the state after a complete epoch. Every replica calls it (it
    /// is collective). Saving is a convenience: a replica that cannot
    /// write says so, no state of this epoch is kept, and training goes on.
    pub(super) fn save(
        &mut self,
        end: &EpochEnd,
        replica: &Replica,
        collective: &dyn Collective,
    ) -> Result<()> {
        let started = Instant::now();
        let epoch = end.epochs_done;
        let partial = self.dir.join(format!(".{EPOCH_PREFIX}{epoch}.partial"));
        let ready = if self.lead() {
            fresh_dir(&partial)
        } else {
            Ok(())
        };
        if let Err(problem) = &ready {
            self.warn(format!(
                "cannot save the resume state of epoch {epoch}: {problem}"
            ));
        }
        if !all_fine(collective, ready.is_ok())? {
            return Ok(());
        }
        let written = self.write_files(&partial, end, replica);
        if let Err(problem) = &written {
            self.warn(format!(
                "cannot save the resume state of epoch {epoch}: {problem}"
            ));
        }
        let fine = all_fine(collective, written.is_ok())?;
        if !self.lead() {
            return Ok(());
        }
        if !fine {
            let _ = std::fs::remove_dir_all(&partial);
            return Ok(());
        }
        let state = self.dir.join(format!("{EPOCH_PREFIX}{epoch}"));
        let _ = std::fs::remove_dir_all(&state);
        if let Err(error) = std::fs::rename(&partial, &state) {
            self.warn(format!(
                "cannot save the resume state of epoch {epoch}: {error}"
            ));
            let _ = std::fs::remove_dir_all(&partial);
            return Ok(());
        }
        remove_all_but(&self.dir, &state);
        if let Ok(best) = written {
            self.last = best.map(|best| (state.clone(), best));
        }
        self.context.message(format!(
            "resume state of epoch {epoch} saved: {} in {}",
            pipe_protocol::format::format_bytes(tree_bytes(&state) as f64),
            pipe_protocol::format::format_seconds(started.elapsed().as_secs_f64())
        ));
        Ok(())
    }

    /// This replica's files of the state (rank 0's progress and best too);
    /// on rank 0, the best file it holds.
    fn write_files(
        &self,
        partial: &Path,
        end: &EpochEnd,
        replica: &Replica,
    ) -> std::result::Result<Option<BestFile>, String> {
        let mut tensors = rank_tensors(replica).map_err(|e| e.to_string())?;
        if !self.replicated || self.lead() {
            tensors.extend(optimizer_tensors(replica).map_err(|e| e.to_string())?);
        }
        write_tensors(&partial.join(rank_file(self.rank)), &tensors)?;
        drop(tensors);
        if !self.lead() {
            return Ok(None);
        }
        let best = self.write_best(partial, end)?;
        let progress = Progress {
            epochs_done: end.epochs_done,
            epochs: self.settings.epochs,
            world: self.world,
            strategy: self.settings.strategy.name().to_string(),
            precision: self.settings.precision.name().to_string(),
            global_step: end.global_step,
            loop_seconds: end.loop_seconds,
            stats: Vec::new(),
            steps: Vec::new(),
            scaler: replica.scaler.as_ref().map(|scaler| {
                let (scale, good, skipped) = scaler.state();
                (scale.to_bits(), good, skipped)
            }),
            phase_steps: replica.phases.steps,
            phase_seconds: replica.phases.seconds.iter().map(|s| s.to_bits()).collect(),
            best: best.clone(),
        };
        let text = progress_text(&progress, end.stats, end.steps)?;
        write_checked(&partial.join(PROGRESS), &text)?;
        Ok(Some(best))
    }

    /// The best epoch's weights: linked from the last state when that one
    /// holds the same epoch's, else from the checkpoint's weights file that
    /// epoch wrote (copied where a link cannot be made).
    fn write_best(&self, partial: &Path, end: &EpochEnd) -> std::result::Result<BestFile, String> {
        let target = partial.join(BEST);
        if let Some((dir, best)) = &self.last {
            if best.epoch == end.best_epoch && std::fs::hard_link(dir.join(BEST), &target).is_ok() {
                return Ok(best.clone());
            }
        }
        let source = end
            .best_file
            .as_ref()
            .ok_or("internal: rank 0 wrote no best weights")?;
        if std::fs::hard_link(source, &target).is_err() {
            std::fs::copy(source, &target)
                .map_err(|e| format!("cannot copy `{}`: {e}", source.display()))?;
        }
        Ok(BestFile {
            epoch: end.best_epoch,
            digest: file_digest(&target, self.limit)?,
        })
    }

    /// Rank 0: the state's best weights back in the checkpoint, copied and
    /// checked again there before they take its name.
    fn put_back_best(&self, best: &Path, expected: &BestFile) -> Result<()> {
        let target = self.context.output(CHECKPOINT).join(WEIGHTS_FILE);
        let partial = target.with_file_name(format!(".{WEIGHTS_FILE}.resumed"));
        let dir = self.context.output(CHECKPOINT);
        std::fs::create_dir_all(&dir).map_err(|e| StageError::io(&dir, e))?;
        std::fs::copy(best, &partial).map_err(|e| StageError::io(best, e))?;
        match file_digest(&partial, self.limit) {
            Ok(digest) if digest == expected.digest => {}
            _ => {
                let _ = std::fs::remove_file(&partial);
                return Err(StageError::Other(format!(
                    "`{}` changed while it was being resumed from; run again to start over",
                    best.display()
                )));
            }
        }
        std::fs::rename(&partial, &target).map_err(|e| StageError::io(&target, e))
    }
}

/// A found state checked against the replica, as tensors to put back.
struct Plan {
    found: Found,
    slots: Vec<(Tensor, Option<[Tensor; 3]>)>,
    dropout: DropoutState,
    memory: Vec<i64>,
}

/// The JSON of `progress` with the epochs' figures and the curve, which
/// it borrows rather than copies.
fn progress_text(
    progress: &Progress,
    stats: &[EpochStats],
    steps: &[StepLine],
) -> std::result::Result<String, String> {
    let mut value = serde_json::to_value(progress).map_err(|e| e.to_string())?;
    value["stats"] = serde_json::to_value(stats).map_err(|e| e.to_string())?;
    value["steps"] = serde_json::to_value(steps).map_err(|e| e.to_string())?;
    Ok(value.to_string())
}

/// The number of the newest `epoch-N` directory (a real one, not a link).
fn newest_state(dir: &Path) -> Option<u64> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|entry| std::fs::symlink_metadata(entry.path()).is_ok_and(|found| found.is_dir()))
        .filter_map(|entry| {
            let name = entry.file_name();
            name.to_str()?
                .strip_prefix(EPOCH_PREFIX)?
                .parse::<u64>()
                .ok()
        })
        .filter(|&epoch| epoch >= 1)
        .max()
}

/// The state's best weights checked without reading them into memory:
/// the file's digest is the one the state recorded, and its header names
/// every weight of the model (whose variables are whole here) with its
/// shape, in the dtype a checkpoint stores it in.
fn check_best(
    path: &Path,
    best: &BestFile,
    model: &SequenceClassifier,
    limit: u64,
) -> std::result::Result<(), String> {
    if file_digest(path, limit)? != best.digest {
        return Err(format!(
            "`{}` does not hold what was written (its digest differs)",
            path.display()
        ));
    }
    let header = weights_header(path, limit)?;
    let variables = model.vs.variables();
    let fits = variables.len() == header.len()
        && header.iter().all(|(name, dtype, shape)| {
            variables.get(name).is_some_and(|variable| {
                dtype_of(saved_kind(variable.kind())) == Some(*dtype)
                    && shape.iter().map(|&d| d as i64).eq(variable.size())
            })
        });
    if fits {
        Ok(())
    } else {
        Err("its best weights do not fit this model".into())
    }
}

/// The dropout position saved for this replica, checked against its device.
fn dropout_of(
    mine: &HashMap<String, SavedTensor>,
    replica: &Replica,
) -> std::result::Result<DropoutState, String> {
    let drawn = integers(mine, "dropout.drawn", 1)?[0];
    let cuda = match replica.device {
        Device::Cuda(index) => {
            let saved = mine
                .get("dropout.cuda")
                .ok_or("it holds no GPU generator state")?;
            let now = replica.model.dropout_state().map_err(|e| e.to_string())?;
            let length = now.cuda().map_or(0, |(_, state)| state.numel());
            if saved.kind() != Some(Kind::Uint8) || saved.shape() != [length] {
                return Err("its GPU generator state does not fit this GPU".into());
            }
            Some((index, saved.to_tensor().map_err(|e| e.to_string())?))
        }
        _ => None,
    };
    Ok(DropoutState::new(drawn as u64, cuda))
}

/// `count` int64 values saved under `name`.
fn integers(
    tensors: &HashMap<String, SavedTensor>,
    name: &str,
    count: usize,
) -> std::result::Result<Vec<i64>, String> {
    let saved = tensors
        .get(name)
        .filter(|saved| saved.kind() == Some(Kind::Int64) && saved.shape() == [count])
        .ok_or_else(|| format!("`{name}` is missing"))?;
    Ok(saved
        .data()
        .chunks_exact(8)
        .map(|bytes| i64::from_le_bytes(bytes.try_into().unwrap_or_default()))
        .collect())
}

/// What every replica saves of itself: dropout's position and memory.
fn rank_tensors(replica: &Replica) -> Result<Vec<(String, SavedTensor)>> {
    let dropout = replica.model.dropout_state()?;
    let mut tensors = vec![(
        "dropout.drawn".to_string(),
        SavedTensor::of(&Tensor::from_slice(&[dropout.drawn() as i64]))?,
    )];
    if let Some((_, state)) = dropout.cuda() {
        tensors.push(("dropout.cuda".to_string(), SavedTensor::of(state)?));
    }
    let held = replica.memory.unwrap_or_default();
    let memory = [
        held.params_bytes as i64,
        held.grads_bytes as i64,
        held.optimizer_bytes as i64,
        replica.peak_bytes() as i64,
        i64::from(replica.memory.is_some()),
    ];
    tensors.push((
        "memory".to_string(),
        SavedTensor::of(&Tensor::from_slice(&memory))?,
    ));
    Ok(tensors)
}

/// The optimizer's parameters and AdamW state, slot by slot.
fn optimizer_tensors(replica: &Replica) -> Result<Vec<(String, SavedTensor)>> {
    let mut tensors = Vec::new();
    for (index, (param, state)) in replica.strategy.optimizer().slots().into_iter().enumerate() {
        tensors.push((format!("slot.{index}.param"), SavedTensor::of(&param)?));
        if let Some([moment, square, step]) = state {
            for (part, tensor) in [("exp_avg", moment), ("exp_avg_sq", square), ("step", step)] {
                tensors.push((format!("slot.{index}.{part}"), SavedTensor::of(&tensor)?));
            }
        }
    }
    Ok(tensors)
}

/// Whether every replica's `fine` is true (a collective: all call it).
fn all_fine(collective: &dyn Collective, fine: bool) -> Result<bool> {
    let mut flag = Tensor::from_slice(&[i64::from(!fine)]);
    collective
        .all_reduce_max(&mut flag)
        .map_err(collective_error)?;
    Ok(Vec::<i64>::try_from(&flag).map_err(torch)?[0] == 0)
}

/// Whether every replica found a sound state, all of the same epoch; and
/// whether any did (so that rank 0, had it been fine, can say why all
/// start over).
fn agree(collective: &dyn Collective, epoch: Option<u64>) -> Result<(bool, bool)> {
    let mine = epoch.map_or(-1, |epoch| epoch as i64);
    let mut extremes = Tensor::from_slice(&[mine, -mine]);
    collective
        .all_reduce_max(&mut extremes)
        .map_err(collective_error)?;
    let extremes = Vec::<i64>::try_from(&extremes).map_err(torch)?;
    let (highest, lowest) = (extremes[0], -extremes[1]);
    Ok((highest >= 1 && highest == lowest, highest >= 1))
}

/// `dir` emptied of what a killed save left, and made (its parent too:
/// the engine makes the resume directory, a worker run by hand may not).
fn fresh_dir(dir: &Path) -> std::result::Result<(), String> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot make `{}`: {e}", parent.display()))?;
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(format!("cannot clear `{}`: {error}", dir.display())),
    }
    std::fs::create_dir(dir).map_err(|e| format!("cannot make `{}`: {e}", dir.display()))
}

/// Removes every entry of `dir` but `keep`: older states, killed saves.
fn remove_all_but(dir: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path == keep {
            continue;
        }
        let removed = match std::fs::symlink_metadata(&path) {
            Ok(found) if found.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
        let _ = removed;
    }
}

/// Bytes of the files of one state directory.
fn tree_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| std::fs::symlink_metadata(entry.path()).ok())
                .filter(|found| found.is_file())
                .map(|found| found.len())
                .sum()
        })
        .unwrap_or(0)
}
