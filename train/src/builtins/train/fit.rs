//! One replica's run, start to end: its place among the others, the
//! model, the epochs (each the step loop of `super::steps` and a
//! validation), and on rank 0 the outputs and metrics.

use std::time::Instant;

use tch::{Device, Tensor};

use pipe_stages::batches::{
    accumulation_steps, limit, pad_id, BucketSampler, Collator, EvalSampler,
};
use pipe_stages::classification::{BestEpoch, EpochVerdict};
use pipe_stages::token_file::{open_split, TokenizedSplit, TOKENIZER_FILE};
use pipe_stages::{Result, StageContext, StageError};

use super::super::classifier::{check_labels, check_lengths, check_pad_id, predict, torch};
use super::checkpoint::write_checkpoint_files;
use super::curves::{write_curves, StepCurve};
use super::devices::{describe_devices, every_replica};
use super::errors::{collective_error, strategy_error};
use super::metrics::{memory_json, metrics_json, EpochStats, Summary};
use super::names::{CHECKPOINT, CURVES, STEPS, WEIGHTS_FILE};
use super::params::TrainParams;
use super::peers::Peers;
use super::replica::Replica;
use super::resume::{EpochEnd, Resume, Resumed};
use super::stage_time::StageTime;
use super::steps::{check_in_step, replica_steps, EpochPlan, StepDone};
use super::totals::TrainTotals;
use super::weights_file::WeightsFile;
use crate::collective::Collective;
use crate::distributed::RankPlace;
use crate::hardware::{self, PeakFlops};
use crate::model::SequenceClassifier;

/// The unit of the epochs' progress bars.
const UNIT: &str = "steps";

/// The unit of validation's progress bar.
const VAL_UNIT: &str = "rows";

/// Trains one replica: the only one (`place` None), or rank `place.rank`
/// of a process group. Rank 0 writes the outputs.
pub(super) fn train(
    context: &StageContext,
    settings: &TrainParams,
    devices: &[Device],
    place: Option<&RankPlace>,
) -> Result<()> {
    let rank = place.map_or(0, |place| place.rendezvous.rank);
    let lead = rank == 0;
    if let Some(place) = place.filter(|place| place.launched_by != "pipe" && !lead) {
        // Every srun task's stdout lands in the one event stream the
        // engine reads (and a torchrun-started rank's in its launcher's);
        // only rank 0 speaks the protocol there. The others' lines go to
        // stderr, which reaches the stage log.
        pipe_stages::events_to_stderr(format!("[rank{}] ", place.rendezvous.rank));
    }
    let mut time = StageTime::start();
    let device = replica_device(devices, place)?;
    tch::set_num_threads(context.threads() as i32);
    let splits = Splits::open(settings)?;
    let model = load_model(context, settings, &splits, device, lead)?;
    let peers = Peers::join(context, settings, device, place)?;
    let collective = peers.collective();
    let world = collective.world_size();
    let schedule = Schedule::new(settings, &splits.train, world)?;
    let mut resume = Resume::new(
        context,
        settings,
        &model,
        rank,
        world,
        schedule.steps_per_epoch,
    );
    // Read while the model's variables are whole (a sharded strategy frees
    // them), put back once its optimizer exists.
    // Looking for a state and finding none is part of the start: only a
    // state read counts as the resume state's time, so that a run that
    // reads none says 0 whatever the machine's load.
    let reading = Instant::now();
    let found = resume.as_ref().and_then(|resume| resume.find(&model));
    let looked = reading.elapsed().as_secs_f64();
    let mut replica = Replica::create(settings, model, device, &peers)?;
    let reading = Instant::now();
    let resumed = match resume.as_mut() {
        Some(resume) => resume.restore(found, &mut replica, collective)?,
        None => None,
    };
    if resumed.is_some() {
        time.resume_read += looked + reading.elapsed().as_secs_f64();
    }
    if lead {
        announce(context, settings, devices, &splits, &schedule, &replica);
    }
    let peak = hardware::peak_flops(
        devices,
        settings.precision.compute_kind(),
        settings.tf32,
        context.threads(),
    );

    let mut epochs = Epochs::new(
        context, settings, &splits, &schedule, collective, lead, time,
    );
    epochs.resume = resume;
    if let Some(resumed) = resumed {
        epochs.continue_from(resumed);
    }
    epochs.run(&mut replica)?;
    let train_seconds = epochs.loop_seconds();
    // Memory: the most any replica held, each process's own peak.
    let memory = memory_json(&replica, collective)?;
    if !lead {
        return Ok(());
    }
    let replicas = every_replica(devices, settings.nodes);
    epochs.write_outputs(&replica, &replicas, train_seconds, memory, &peak)
}

/// The device of this process's replica: the only one, or that of its
/// local rank.
fn replica_device(devices: &[Device], place: Option<&RankPlace>) -> Result<Device> {
    Ok(match place {
        None => devices[0],
        Some(place) => *devices.get(place.local_rank).ok_or_else(|| {
            StageError::Other(format!(
                "internal: local rank {} of {} devices",
                place.local_rank,
                devices.len()
            ))
        })?,
    })
}

/// The token files the run trains and validates on, and the collator
/// that pads their batches.
struct Splits {
    train: TokenizedSplit,
    val: TokenizedSplit,
    /// Validation's batches: wide ones, as a forward without autograd
    /// affords (`EvalSampler::for_inference`).
    val_batches: EvalSampler,
    pad: u32,
    collator: Collator,
}

impl Splits {
    fn open(settings: &TrainParams) -> Result<Splits> {
        let tokens = &settings.tokens;
        let train = open_split(tokens, "train")?;
        let val = open_split(tokens, "val")?;
        check_labels(&train, settings.num_labels)?;
        check_labels(&val, settings.num_labels)?;
        let pad = pad_id(&tokens.join(TOKENIZER_FILE))?;
        let val_batches = EvalSampler::for_inference(&val.lengths(), settings.batch_size)?;
        Ok(Splits {
            train,
            val,
            val_batches,
            pad,
            collator: Collator::new(pad),
        })
    }
}

/// The pretrained model with a fresh head of `num_labels`, checked
/// against the splits it will read.
fn load_model(
    context: &StageContext,
    settings: &TrainParams,
    splits: &Splits,
    device: Device,
    lead: bool,
) -> Result<SequenceClassifier> {
    // Seeds the head's fresh initialisation here and dropout later.
    tch::manual_seed(settings.seed as i64);
    let (model, report) =
        SequenceClassifier::from_pretrained(&settings.model, Some(settings.num_labels), device)?;
    check_lengths(&splits.train, &model)?;
    check_lengths(&splits.val, &model)?;
    check_pad_id(splits.pad, &settings.tokens, &model)?;
    // Every id of both splits and the pad are in the vocabulary.
    model.vouch_for_ids();
    if lead && !report.missing.is_empty() {
        context.message(format!(
            "initialised fresh (seed {}): {}",
            settings.seed,
            report.missing.join(", ")
        ));
    }
    Ok(model)
}

/// Which rows each epoch trains on and how they become optimizer steps:
/// the same on every replica.
struct Schedule {
    /// Rows trained on per epoch (all of them, or `limit_train_samples`).
    train_rows: usize,
    sampler: BucketSampler,
    steps_per_epoch: u64,
    total_steps: u64,
    warmup_steps: u64,
    /// Replicas in the whole run.
    world: usize,
}

impl Schedule {
    fn new(settings: &TrainParams, train: &TokenizedSplit, world: usize) -> Result<Schedule> {
        let rows = limit(
            train.len(),
            settings.limit_train_samples.unwrap_or(usize::MAX),
            settings.seed,
        );
        let train_rows = rows.len();
        // One global batch per step of every replica together, cut into
        // equal shards (Lightning's batch_size is per device).
        let sampler = BucketSampler::subset(
            rows,
            &train.lengths(),
            settings.batch_size * world,
            settings.seed,
        )?
        .multiple_of(world);
        let steps_per_epoch = sampler.batches_per_epoch().div_ceil(settings.accumulate) as u64;
        let total_steps = steps_per_epoch * settings.epochs;
        let warmup_steps = (settings.warmup_ratio * total_steps as f64).ceil() as u64;
        Ok(Schedule {
            train_rows,
            sampler,
            steps_per_epoch,
            total_steps,
            warmup_steps,
            world,
        })
    }
}

/// Rank 0's lines before the first epoch: what it trains on, and how.
fn announce(
    context: &StageContext,
    settings: &TrainParams,
    devices: &[Device],
    splits: &Splits,
    schedule: &Schedule,
    replica: &Replica,
) {
    context.message(format!(
        "training on {} rows ({} batches of {}, {} optimizer steps per epoch), \
         validating on {} rows, {} on {} in {}",
        schedule.train_rows,
        schedule.sampler.batches_per_epoch(),
        settings.batch_size * schedule.world,
        schedule.steps_per_epoch,
        splits.val.len(),
        replica.model.config.architecture.model_type(),
        describe_devices(settings.strategy, devices, settings.nodes),
        settings.precision,
    ));
    if let Some(note) = hardware::bf16_note(settings.precision.compute_kind(), replica.device) {
        context.message(note);
    }
}

/// The epochs of one replica and what they leave behind: each epoch's
/// figures, the best epoch and, on rank 0, its weights and the step curve.
struct Epochs<'a> {
    context: &'a StageContext,
    settings: &'a TrainParams,
    splits: &'a Splits,
    schedule: &'a Schedule,
    collective: &'a dyn Collective,
    lead: bool,
    best: BestEpoch,
    /// Whether the checkpoint's weights file holds the best epoch's
    /// weights yet (rank 0 writes it when an epoch improves).
    best_saved: bool,
    stats: Vec<EpochStats>,
    /// Optimizer steps taken so far.
    global_step: u64,
    stopped_early: bool,
    step_curve: StepCurve,
    /// Where the state after each epoch is saved, when the engine gave a
    /// resume directory.
    resume: Option<Resume<'a>>,
    /// The epochs an interrupted attempt completed, and the time they took.
    epochs_done: u64,
    earlier_seconds: f64,
    loop_started: Instant,
    /// Where the stage's time went, for the metrics.
    time: StageTime,
}

impl<'a> Epochs<'a> {
    fn new(
        context: &'a StageContext,
        settings: &'a TrainParams,
        splits: &'a Splits,
        schedule: &'a Schedule,
        collective: &'a dyn Collective,
        lead: bool,
        time: StageTime,
    ) -> Epochs<'a> {
        Epochs {
            context,
            settings,
            splits,
            schedule,
            collective,
            lead,
            best: BestEpoch::new(settings.patience, 0.0),
            best_saved: false,
            stats: Vec::new(),
            global_step: 0,
            stopped_early: false,
            step_curve: StepCurve::new(settings.log_every_n_steps),
            resume: None,
            epochs_done: 0,
            earlier_seconds: 0.0,
            loop_started: Instant::now(),
            time,
        }
    }

    /// Takes up where an interrupted attempt's last complete epoch left
    /// off: its figures, its curve, its best epoch (replayed, so early
    /// stopping counts as it did) and the time it took.
    fn continue_from(&mut self, resumed: Resumed) {
        for stats in &resumed.stats {
            self.best.record(stats.epoch as u32, stats.val_acc);
        }
        self.epochs_done = resumed.epochs_done;
        self.global_step = resumed.global_step;
        self.earlier_seconds = resumed.loop_seconds;
        self.stats = resumed.stats;
        self.step_curve = StepCurve::resumed(self.settings.log_every_n_steps, resumed.steps);
        self.best_saved = resumed.best_restored;
    }

    /// The training loop's time: this attempt's and the interrupted ones'.
    fn loop_seconds(&self) -> f64 {
        self.earlier_seconds + self.loop_started.elapsed().as_secs_f64()
    }

    /// Every epoch, or up to the one early stopping ends with.
    fn run(&mut self, replica: &mut Replica) -> Result<()> {
        self.loop_started = Instant::now();
        self.time.loop_starts();
        for epoch in self.epochs_done..self.settings.epochs {
            if self.epoch(replica, epoch)? == EpochVerdict::Stop {
                self.stop_early(epoch);
                break;
            }
        }
        Ok(())
    }

    /// Early stopping said stop after `epoch` (0-based).
    fn stop_early(&mut self, epoch: u64) {
        self.stopped_early = epoch + 1 < self.settings.epochs;
        if self.stopped_early && self.lead {
            self.context.message(format!(
                "early stopping: no better val accuracy for {} epochs",
                self.settings.patience.unwrap_or(0)
            ));
        }
    }

    /// One epoch (0-based): its steps, the replicas' check-in, validation,
    /// and whether it is the best so far.
    fn epoch(&mut self, replica: &mut Replica, epoch: u64) -> Result<EpochVerdict> {
        let started = Instant::now();
        let (totals, steps) = self.train_steps(replica, epoch, started)?;
        let train_seconds = started.elapsed().as_secs_f64();
        self.time.steps += train_seconds;
        // Under fsdp no replica holds the weights to compare: each holds
        // its own shards, and every gather gives all the same unit.
        if self.schedule.world > 1 && replica.strategy.holds_whole_weights() {
            check_in_step(replica, self.collective, epoch + 1)?;
        }
        let validating = Instant::now();
        let (val_loss, val_acc) = self.validate(replica, epoch)?;
        self.time.validation += validating.elapsed().as_secs_f64();
        let stats = EpochStats {
            epoch: epoch + 1,
            train_loss: totals.mean_loss()?,
            train_acc: totals.correct.value()? / totals.rows.max(1) as f64,
            val_loss,
            val_acc,
            epoch_seconds: train_seconds,
            val_seconds: started.elapsed().as_secs_f64() - train_seconds,
            rows: totals.rows,
            tokens: totals.tokens,
            padded_tokens: totals.padded_tokens,
            flops: totals.flops,
            steps,
            samples_per_s: totals.rows as f64 / train_seconds.max(1e-9),
            tokens_per_s: totals.tokens as f64 / train_seconds.max(1e-9),
        };
        let verdict = self.best.record(epoch as u32 + 1, stats.val_acc);
        if verdict == EpochVerdict::Improved {
            let saving = Instant::now();
            self.save_best(replica)?;
            self.time.checkpoint += saving.elapsed().as_secs_f64();
        }
        if self.lead {
            self.context.message(format!(
                "epoch {}/{}: train loss {:.4} acc {:.4}, val loss {:.4} acc {:.4}{}, {}, {:.1} samples/s, {:.0} tokens/s",
                stats.epoch,
                self.settings.epochs,
                stats.train_loss,
                stats.train_acc,
                stats.val_loss,
                stats.val_acc,
                if verdict == EpochVerdict::Improved { " (best)" } else { "" },
                pipe_protocol::format::format_seconds(stats.epoch_seconds),
                stats.samples_per_s,
                stats.tokens_per_s,
            ));
        }
        self.stats.push(stats);
        // A state is for an epoch still to come: after the last one, or
        // the one early stopping ends with, the outputs follow at once.
        if verdict != EpochVerdict::Stop && epoch + 1 < self.settings.epochs {
            let saving = Instant::now();
            self.save_state(replica, epoch + 1)?;
            self.time.resume_state += saving.elapsed().as_secs_f64();
        }
        Ok(verdict)
    }

    /// The resume state after epoch `epochs_done` (1-based), if the engine
    /// gave a resume directory. Every replica takes part.
    fn save_state(&mut self, replica: &Replica, epochs_done: u64) -> Result<()> {
        let loop_seconds = self.loop_seconds();
        let best_file = (self.lead && self.best_saved).then(|| self.weights_path());
        let Some(resume) = self.resume.as_mut() else {
            return Ok(());
        };
        let end = EpochEnd {
            epochs_done,
            global_step: self.global_step,
            loop_seconds,
            stats: &self.stats,
            steps: self.step_curve.lines(),
            best_epoch: self.best.best().map_or(0, |(epoch, _)| epoch),
            best_file,
        };
        resume.save(&end, replica, self.collective)
    }

    /// The epoch's optimizer steps, with rank 0's progress bar and step
    /// curve; returns every replica's totals summed and the steps taken.
    fn train_steps(
        &mut self,
        replica: &mut Replica,
        epoch: u64,
        started: Instant,
    ) -> Result<(TrainTotals, u64)> {
        let (context, settings, schedule) = (self.context, self.settings, self.schedule);
        let (world, steps_per_epoch) = (schedule.world, schedule.steps_per_epoch);
        let phase = format!("train epoch {}/{}", epoch + 1, settings.epochs);
        if self.lead {
            context.progress(&phase, 0, Some(steps_per_epoch), UNIT);
        }
        let steps = accumulation_steps(schedule.sampler.epoch(epoch), settings.accumulate)?;
        let plan = EpochPlan {
            steps: &steps,
            first_step: self.global_step,
            total_steps: schedule.total_steps,
            warmup_steps: schedule.warmup_steps,
            settings,
            split: &self.splits.train,
            collator: &self.splits.collator,
            world,
        };
        // The running mean loss and the rate, beside the bar. Rank 0's
        // rows only: the other replicas' are added up at the epoch's end.
        let live = |totals: &TrainTotals, replicas: usize| {
            let seconds = started.elapsed().as_secs_f64().max(1e-9);
            format!(
                "loss {:.4}  {:.1} samples/s",
                totals.mean_loss().unwrap_or(f64::NAN),
                (totals.rows * replicas) as f64 / seconds
            )
        };
        let last_step = steps.len() as u64;
        let step_curve = &mut self.step_curve;
        let mut report = |done: &StepDone| -> Result<()> {
            step_curve.record(
                epoch + 1,
                plan.first_step + done.index,
                done,
                done.index == last_step,
            )?;
            context.progress_with(&phase, done.index, Some(steps_per_epoch), UNIT, || {
                Some(live(done.epoch, world))
            });
            Ok(())
        };
        let totals = replica_steps(
            replica,
            &plan,
            self.collective,
            if self.lead { Some(&mut report) } else { None },
        )?;
        let totals = totals.summed(self.collective)?;
        self.global_step += last_step;
        if self.lead {
            context.progress_done_with(&phase, steps_per_epoch, UNIT, Some(live(&totals, 1)));
        }
        Ok((totals, last_step))
    }

    /// Every rank validates (no rank waits on rank 0 longer than a
    /// collective may), and all take rank 0's figures, so that they agree
    /// on the best epoch and on stopping. Returns the loss and accuracy.
    /// Rank 0 reports it as a phase of its own, in rows: a bar left at the
    /// epoch's last step for the minutes validation takes looks hung.
    fn validate(&self, replica: &mut Replica, epoch: u64) -> Result<(f64, f64)> {
        let context = self.context;
        let phase = format!("validate epoch {}/{}", epoch + 1, self.settings.epochs);
        let rows = self.splits.val.len() as u64;
        if self.lead {
            context.progress(&phase, 0, Some(rows), VAL_UNIT);
        }
        let lead = self.lead;
        let collective = self.collective;
        let Replica {
            model,
            strategy,
            device,
            ..
        } = replica;
        let validation = predict(
            &mut |ids, mask| {
                strategy
                    .eval_forward(model, collective, ids, mask)
                    .map_err(strategy_error)
            },
            &self.splits.val,
            &self.splits.collator,
            &self.splits.val_batches,
            self.settings.precision.autocast_kind(),
            *device,
            &mut |done| {
                if lead {
                    context.progress(&phase, done, Some(rows), VAL_UNIT);
                }
            },
        )?;
        if self.lead {
            context.progress_done(&phase, rows, VAL_UNIT);
        }
        rank0_pair(
            self.collective,
            validation.mean_loss(),
            validation.accuracy(),
        )
    }

    /// Where the best epoch's weights go: the checkpoint's
    /// `model.safetensors`.
    fn weights_path(&self) -> std::path::PathBuf {
        self.context.output(CHECKPOINT).join(WEIGHTS_FILE)
    }

    /// An improved epoch's weights into the checkpoint, streamed: every
    /// replica takes part (the strategy gathers what it shards, one unit
    /// at a time under fsdp), rank 0 writes each weight at its place. A
    /// write that fails on rank 0 lets the walk finish, so that no replica
    /// waits in a collective for it, and then fails the stage.
    fn save_best(&mut self, replica: &mut Replica) -> Result<()> {
        let layout = replica.strategy.weight_layout(&replica.model);
        let mut file = if self.lead {
            Some(WeightsFile::create(&self.weights_path(), &layout)?)
        } else {
            None
        };
        let mut failure: Option<StageError> = None;
        replica
            .strategy
            .visit_weights(&replica.model, self.collective, &mut |name, tensor| {
                if let (Some(file), None) = (file.as_mut(), failure.as_ref()) {
                    failure = file.put(name, tensor).err();
                }
                Ok(())
            })
            .map_err(strategy_error)?;
        if let Some(failure) = failure {
            return Err(failure);
        }
        if let Some(file) = file {
            file.finish()?;
        }
        self.best_saved = true;
        Ok(())
    }

    /// Rank 0's outputs: the best epoch's checkpoint, the curves, the
    /// metrics.
    fn write_outputs(
        mut self,
        replica: &Replica,
        devices: &[Device],
        train_seconds: f64,
        memory: serde_json::Value,
        peak: &PeakFlops,
    ) -> Result<()> {
        let (context, settings) = (self.context, self.settings);
        let (Some((best_epoch, best_acc)), true) = (self.best.best(), self.best_saved) else {
            return Err(StageError::Other(
                "internal: training ran no epoch".to_string(),
            ));
        };
        let writing = Instant::now();
        write_checkpoint_files(
            &context.output(CHECKPOINT),
            &replica.model,
            &settings.model,
            &settings.tokens,
        )?;
        self.time.checkpoint += writing.elapsed().as_secs_f64();
        write_curves(&context.output(CURVES), &self.stats)?;
        self.step_curve.write(&context.output(STEPS))?;

        context.write_metrics(&metrics_json(&Summary {
            settings,
            devices,
            replica,
            world: self.schedule.world,
            epochs: &self.stats,
            best_epoch,
            best_acc,
            stopped_early: self.stopped_early,
            train_rows: self.schedule.train_rows,
            optimizer_steps: self.global_step,
            train_seconds,
            memory,
            peak,
            stage_seconds: self.time.to_json(),
        }))?;
        Ok(())
    }
}

/// Rank 0's two figures on every rank.
fn rank0_pair(collective: &dyn Collective, a: f64, b: f64) -> Result<(f64, f64)> {
    if collective.world_size() == 1 {
        return Ok((a, b));
    }
    let mut pair = Tensor::from_slice(&[a, b]);
    collective
        .broadcast(0, &mut pair)
        .map_err(collective_error)?;
    let values = Vec::<f64>::try_from(&pair).map_err(torch)?;
    Ok((values[0], values[1]))
}
