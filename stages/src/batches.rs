//! The data side of training and evaluation: given the ragged token files
//! of `text/tokenize@1` (read by [`crate::token_file`]), choosing rows (`limit`), ordering them into batches
//! (length-bucketed for training, sorted for evaluation), padding each batch
//! to its own longest row, and cutting batches for data-parallel replicas and
//! gradient accumulation.
//!
//! Pure Rust and independent of libtorch, so all of it is tested without a
//! model: the training loop turns a [`Batch`] into tensors and does nothing
//! else with the data. Everything seeded uses [`SplitMix64`] only, so the
//! same seed and epoch give the same batches on every machine.
//!
//! A training epoch:
//!
//! ```no_run
//! # use pipe_stages::batches::*;
//! # use pipe_stages::token_file::TokenizedSplit;
//! # fn main() -> pipe_stages::Result<()> {
//! let split = TokenizedSplit::open("tokens/train.safetensors".as_ref())?;
//! let rows = limit(split.len(), 4000, 123); // limit_train_samples
//! let sampler = BucketSampler::subset(rows, &split.lengths(), 32, 123)?;
//! let collator = Collator::new(0);
//! for step in accumulation_steps(sampler.epoch(0), 2)? {
//!     for micro_batch in &step {
//!         let batch = collator.collate(&split, micro_batch)?;
//!         // tensors of shape [batch.rows, batch.seq_len] from batch.input_ids ...
//!     }
//! }
//! # Ok(())
//! # }
//! ```

use std::path::Path;

use crate::rng::SplitMix64;
use crate::token_file::TokenizedSplit;
use crate::{Result, StageError};

/// How many batches' worth of rows [`BucketSampler`] sorts by length at a
/// time, unless told otherwise: Hugging Face's `group_by_length` uses 50
/// ("megabatches"), which keeps most of the padding saving of a full sort
/// while rows still meet different neighbours every epoch.
pub const DEFAULT_CHUNK_BATCHES: usize = 50;

/// The pad id of a Hugging Face `tokenizer.json`: that of its padding
/// settings when it has them, else the id of `[PAD]` (BERT, DistilBERT) or
/// `<pad>` (RoBERTa, T5). The tokenize stage clears padding before
/// encoding but copies the file unchanged, so the settings are still there.
pub fn pad_id(tokenizer_json: &Path) -> Result<u32> {
    let tokenizer = tokenizers::Tokenizer::from_file(tokenizer_json).map_err(|e| {
        StageError::input(
            format!("cannot load tokenizer `{}`: {e}", tokenizer_json.display()),
            "use the tokenizer.json that text/tokenize@1 copied beside the token files",
        )
    })?;
    if let Some(padding) = tokenizer.get_padding() {
        return Ok(padding.pad_id);
    }
    ["[PAD]", "<pad>"]
        .iter()
        .find_map(|token| tokenizer.token_to_id(token))
        .ok_or_else(|| {
            StageError::input(
                format!(
                    "tokenizer `{}` has no padding settings and no [PAD] or <pad> token",
                    tokenizer_json.display()
                ),
                "give the pad id explicitly; any id works for padded positions, since the attention mask hides them",
            )
        })
}

/// A generator for one purpose and epoch, so that `limit`, the epochs of
/// the sampler and anything added later draw unrelated streams from one
/// user seed: with plain `seed + epoch`, seed 1 epoch 0 would repeat seed 0
/// epoch 1, and `limit` would pick the rows of epoch 0's first batches.
fn stream(seed: u64, purpose: u64, epoch: u64) -> SplitMix64 {
    let a = SplitMix64::new(seed).next_u64();
    let b = SplitMix64::new(purpose.wrapping_mul(0xA076_1D64_78BD_642F) ^ epoch).next_u64();
    SplitMix64::new(a ^ b)
}

const LIMIT_STREAM: u64 = 1;
const BUCKET_STREAM: u64 = 2;

/// The rows to train on when only `n` of `rows` are wanted (the
/// `limit_train_samples` param): the first `n` of a seeded shuffle, given
/// back in row order. All rows when `n >= rows`. The choice depends on
/// `seed` only, never on the epoch, so every epoch sees the same rows.
pub fn limit(rows: usize, n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..rows).collect();
    if n >= rows {
        return order;
    }
    stream(seed, LIMIT_STREAM, 0).shuffle(&mut order);
    order.truncate(n);
    // Row order makes the subset easy to inspect and log; the sampler
    // shuffles it anyway.
    order.sort_unstable();
    order
}

fn check_rows(rows: &[usize], lengths: &[usize], batch_size: usize) -> Result<()> {
    if batch_size == 0 {
        return Err(StageError::param(
            "batch_size",
            "must be at least 1",
            "32 is usual",
        ));
    }
    if let Some(&row) = rows.iter().find(|&&row| row >= lengths.len()) {
        return Err(StageError::Other(format!(
            "row {row} is past the end of a split of {} rows",
            lengths.len()
        )));
    }
    Ok(())
}

/// Training batches that group rows of similar length, so that padding
/// each batch to its longest row wastes little, while keeping the batches
/// random from epoch to epoch. Each epoch: shuffle the rows; cut them into
/// chunks of `chunk_batches * batch_size`; sort each chunk by length,
/// longest first (stable, so ties keep their shuffled order); cut the
/// chunks into batches; shuffle the order of the batches, then swap the
/// batch holding the longest row to the front. This is the scheme of
/// Hugging Face's `group_by_length` (LengthGroupedSampler, which also puts
/// the longest first) and torchtext's BucketIterator. Longest first makes
/// a run that does not fit in memory fail on its first step, not an hour
/// in, and makes the first step's peak memory the epoch's.
///
/// Every row comes exactly once per epoch; only the very last batch of an
/// epoch can be short, and [`drop_last`](Self::drop_last) drops it. The
/// batches depend on (seed, epoch) and nothing else.
#[derive(Debug, Clone)]
pub struct BucketSampler {
    rows: Vec<usize>,
    /// The length of each of `rows`, at the same position.
    lengths: Vec<usize>,
    batch_size: usize,
    seed: u64,
    drop_last: bool,
    chunk_batches: usize,
    multiple_of: usize,
}

impl BucketSampler {
    /// Over every row of a split with these lengths (`split.lengths()`).
    pub fn new(lengths: &[usize], batch_size: usize, seed: u64) -> Result<BucketSampler> {
        BucketSampler::subset((0..lengths.len()).collect(), lengths, batch_size, seed)
    }

    /// Over `rows` only (from [`limit`]); `lengths` holds every row of the
    /// split, indexed by row.
    pub fn subset(
        rows: Vec<usize>,
        lengths: &[usize],
        batch_size: usize,
        seed: u64,
    ) -> Result<BucketSampler> {
        check_rows(&rows, lengths, batch_size)?;
        let row_lengths = rows.iter().map(|&row| lengths[row]).collect();
        Ok(BucketSampler {
            rows,
            lengths: row_lengths,
            batch_size,
            seed,
            drop_last: false,
            chunk_batches: DEFAULT_CHUNK_BATCHES,
            multiple_of: 1,
        })
    }

    /// Drop the epoch's last batch when it is short, as PyTorch's
    /// `DataLoader(drop_last=True)`: fewer rows that epoch, but every
    /// step the same number of rows.
    pub fn drop_last(mut self, drop_last: bool) -> BucketSampler {
        self.drop_last = drop_last;
        self
    }

    /// Sort `chunk_batches` batches' worth of rows at a time (at least 1).
    /// 1 groups only within a batch (no saving); a value covering the whole
    /// split sorts it all, which saves the most padding but gives every
    /// batch the same neighbours every epoch.
    pub fn chunk_batches(mut self, chunk_batches: usize) -> BucketSampler {
        self.chunk_batches = chunk_batches.max(1);
        self
    }

    /// Cut the epoch's short last batch down to a multiple of `replicas`
    /// (dropping it when none remain), so that every batch can be sharded
    /// evenly for data-parallel training (see [`shard`]). At most
    /// `replicas - 1` rows are left out of an epoch, different ones each
    /// epoch. A single-device run meant to match a DDP run must use the
    /// same value.
    pub fn multiple_of(mut self, replicas: usize) -> BucketSampler {
        self.multiple_of = replicas.max(1);
        self
    }

    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The rows sampled from, as given.
    pub fn rows(&self) -> &[usize] {
        &self.rows
    }

    /// The number of batches every epoch has (for progress and LR schedules).
    pub fn batches_per_epoch(&self) -> usize {
        let full = self.rows.len() / self.batch_size;
        let rest = self.rows.len() % self.batch_size;
        let rest = rest - rest % self.multiple_of;
        full + usize::from(rest > 0 && !self.drop_last)
    }

    /// The rows of each batch of epoch `epoch`, as row indices of the split.
    pub fn epoch(&self, epoch: u64) -> Vec<Vec<usize>> {
        let mut rng = stream(self.seed, BUCKET_STREAM, epoch);
        // Positions into `rows`/`lengths`, turned into rows at the end.
        let mut order: Vec<usize> = (0..self.rows.len()).collect();
        rng.shuffle(&mut order);
        let chunk = self.chunk_batches.saturating_mul(self.batch_size);
        for part in order.chunks_mut(chunk) {
            part.sort_by_key(|&position| std::cmp::Reverse(self.lengths[position]));
        }
        // Chunks are whole batches, so only the last batch can be short.
        let mut batches: Vec<&[usize]> = order.chunks(self.batch_size).collect();
        if let Some(last) = batches.last_mut() {
            if last.len() < self.batch_size {
                let keep = last.len() - last.len() % self.multiple_of;
                if self.drop_last || keep == 0 {
                    batches.pop();
                } else {
                    *last = &last[..keep];
                }
            }
        }
        rng.shuffle(&mut batches);
        // A batch's first row is its longest (chunks are sorted longest
        // first); `max_by_key` would take the last of equals, so fold.
        let mut front = 0;
        for (index, batch) in batches.iter().enumerate() {
            if self.lengths[batch[0]] > self.lengths[batches[front][0]] {
                front = index;
            }
        }
        if !batches.is_empty() {
            batches.swap(0, front);
        }
        batches
            .into_iter()
            .map(|batch| batch.iter().map(|&position| self.rows[position]).collect())
            .collect()
    }
}

/// How many times the positions of a training batch an inference batch
/// ([`EvalSampler::for_inference`]) may hold. A forward without autograd
/// keeps one layer's activations at a time, where the training step kept
/// every layer's for its backward (6 layers in MiniLM-L6, 12 in BERT-base),
/// so four times the step's positions fit in the memory the steps already
/// needed.
pub const INFERENCE_POSITIONS_FACTOR: usize = 4;

/// Batches for evaluation and prediction: every row once, sorted by length
/// (longest first, so that running out of memory shows on the first batch,
/// ties in row order), so each batch pads as little as possible. No seed:
/// the order is fixed.
#[derive(Debug, Clone)]
pub struct EvalSampler {
    batches: Vec<Vec<usize>>,
}

impl EvalSampler {
    /// Over every row of a split with these lengths.
    pub fn new(lengths: &[usize], batch_size: usize) -> Result<EvalSampler> {
        EvalSampler::subset((0..lengths.len()).collect(), lengths, batch_size)
    }

    /// Over `rows` only; `lengths` holds every row of the split.
    pub fn subset(
        mut rows: Vec<usize>,
        lengths: &[usize],
        batch_size: usize,
    ) -> Result<EvalSampler> {
        check_rows(&rows, lengths, batch_size)?;
        rows.sort_by_key(|&row| (std::cmp::Reverse(lengths[row]), row));
        Ok(EvalSampler {
            batches: rows.chunks(batch_size).map(<[usize]>::to_vec).collect(),
        })
    }

    /// Batches for a forward without autograd, as validation runs between
    /// epochs: every row once, longest first, each batch as many rows as
    /// fit in [`INFERENCE_POSITIONS_FACTOR`] times the positions of the
    /// training's largest batch (`batch_size` rows of the split's longest
    /// row) when padded to its first (longest) row, and none padded by more
    /// than an eighth of that: a new batch starts at the first row shorter
    /// than 7/8 of it. On the quickstart's 1,281 val rows that is 16
    /// batches and 6% padding where batches of 32 are 41 and 3%: wider
    /// matmuls and far fewer threaded regions to meet in, which pays most
    /// on a busy machine (docs/performance.md, "The quickstart's train
    /// stage against the GEMM roof and eager PyTorch").
    pub fn for_inference(lengths: &[usize], batch_size: usize) -> Result<EvalSampler> {
        let mut rows: Vec<usize> = (0..lengths.len()).collect();
        check_rows(&rows, lengths, batch_size)?;
        rows.sort_by_key(|&row| (std::cmp::Reverse(lengths[row]), row));
        let longest = rows.first().map_or(1, |&row| lengths[row].max(1));
        let positions = INFERENCE_POSITIONS_FACTOR * batch_size * longest;
        let mut batches: Vec<Vec<usize>> = Vec::new();
        let mut rest = rows.as_slice();
        while let Some(&first) = rest.first() {
            let longest_here = lengths[first];
            let take = rest
                .iter()
                .take(positions / longest_here.max(1))
                .take_while(|&&row| 8 * lengths[row] >= 7 * longest_here)
                .count();
            batches.push(rest[..take].to_vec());
            rest = &rest[take..];
        }
        Ok(EvalSampler { batches })
    }

    /// The rows of each batch, in the order to run them.
    pub fn batches(&self) -> &[Vec<usize>] {
        &self.batches
    }

    /// The rows in the order they are evaluated (all batches, one after
    /// another): outputs collected in that order go back to row order with
    /// [`to_row_order`].
    pub fn order(&self) -> Vec<usize> {
        self.batches.concat()
    }
}

/// Puts per-row results back in row order: `rows[k]` is the row that
/// `values[k]` belongs to (concatenated `Batch::indices`, or
/// [`EvalSampler::order`]). Returns (row, value) pairs sorted by row, so
/// predictions can be written in dataset order even for a subset.
pub fn to_row_order<T>(rows: &[usize], values: Vec<T>) -> Result<Vec<(usize, T)>> {
    if rows.len() != values.len() {
        return Err(StageError::Other(format!(
            "{} results for {} rows",
            values.len(),
            rows.len()
        )));
    }
    let mut pairs: Vec<(usize, T)> = rows.iter().copied().zip(values).collect();
    pairs.sort_by_key(|&(row, _)| row);
    Ok(pairs)
}

/// One batch ready to become tensors: `rows x seq_len`, row-major, i64 as
/// embedding lookups and cross-entropy targets want.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub input_ids: Vec<i64>,
    /// 1 for a real token, 0 for padding (padding goes on the right).
    pub attention_mask: Vec<i64>,
    pub labels: Vec<i64>,
    pub rows: usize,
    pub seq_len: usize,
    /// The split's row of each batch row, to put predictions back in order.
    pub indices: Vec<usize>,
    /// Real (unpadded) tokens: the honest numerator of tokens/s.
    pub real_tokens: usize,
}

impl Batch {
    /// All positions, padding included: `rows * seq_len`.
    pub fn padded_tokens(&self) -> usize {
        self.rows * self.seq_len
    }
}

/// Pads rows into [`Batch`]es ("dynamic padding": each batch only to its
/// own longest row, not every row to `max_length`).
#[derive(Debug, Clone, Copy)]
pub struct Collator {
    pad_id: i64,
    pad_to_multiple_of: usize,
}

impl Collator {
    /// `pad_id` from the tokenizer ([`pad_id`]); the attention mask hides
    /// padded positions, but using the model's own pad id keeps the inputs
    /// identical to those of Hugging Face's `DataCollatorWithPadding`.
    pub fn new(pad_id: u32) -> Collator {
        Collator {
            pad_id: i64::from(pad_id),
            pad_to_multiple_of: 1,
        }
    }

    /// Round `seq_len` up to a multiple of `multiple` (8 suits tensor cores
    /// in half precision; 1, the default, does not round).
    pub fn pad_to_multiple_of(mut self, multiple: usize) -> Collator {
        self.pad_to_multiple_of = multiple.max(1);
        self
    }

    /// The batch of `rows`, padded to the longest of them.
    pub fn collate(&self, split: &TokenizedSplit, rows: &[usize]) -> Result<Batch> {
        let longest = self.longest(split, rows)?;
        self.fill(
            split,
            rows,
            longest.next_multiple_of(self.pad_to_multiple_of),
        )
    }

    /// The batch of `rows`, padded to exactly `seq_len`; an error if a row is
    /// longer.
    pub fn collate_to(
        &self,
        split: &TokenizedSplit,
        rows: &[usize],
        seq_len: usize,
    ) -> Result<Batch> {
        let longest = self.longest(split, rows)?;
        if longest > seq_len {
            return Err(StageError::Other(format!(
                "a row of {longest} tokens does not fit a batch padded to {seq_len}"
            )));
        }
        self.fill(split, rows, seq_len)
    }

    /// One global batch as `replicas` batches for data-parallel training:
    /// contiguous slices of `rows` (see [`shard`]), all padded to the
    /// global batch's seq_len. Equal shapes make every replica do the same
    /// work and allocate the same buffers, so no replica waits at the
    /// gradient all-reduce for a longer one (a step takes as long as the
    /// slowest replica anyway, so the extra padding costs no time), and
    /// a step's shapes do not depend on how rows fell between replicas.
    pub fn collate_shards(
        &self,
        split: &TokenizedSplit,
        rows: &[usize],
        replicas: usize,
    ) -> Result<Vec<Batch>> {
        let shards = shard(rows, replicas)?;
        let seq_len = self
            .longest(split, rows)?
            .next_multiple_of(self.pad_to_multiple_of);
        shards
            .into_iter()
            .map(|part| self.fill(split, part, seq_len))
            .collect()
    }

    fn longest(&self, split: &TokenizedSplit, rows: &[usize]) -> Result<usize> {
        let mut longest = 0;
        for &row in rows {
            let sequence = split.get(row).ok_or_else(|| {
                StageError::Other(format!(
                    "row {row} is past the end of `{}` ({} rows)",
                    split.path().display(),
                    split.len()
                ))
            })?;
            longest = longest.max(sequence.len());
        }
        Ok(longest)
    }

    /// `rows` are known to exist and to fit in `seq_len`.
    fn fill(&self, split: &TokenizedSplit, rows: &[usize], seq_len: usize) -> Result<Batch> {
        let size = rows.len() * seq_len;
        let mut input_ids = vec![self.pad_id; size];
        let mut attention_mask = vec![0; size];
        let mut real_tokens = 0;
        for (&row, (ids, mask)) in rows.iter().zip(
            input_ids
                .chunks_exact_mut(seq_len.max(1))
                .zip(attention_mask.chunks_exact_mut(seq_len.max(1))),
        ) {
            let sequence = split.sequence(row);
            for (slot, &id) in ids.iter_mut().zip(sequence) {
                *slot = i64::from(id);
            }
            mask[..sequence.len()].fill(1);
            real_tokens += sequence.len();
        }
        Ok(Batch {
            input_ids,
            attention_mask,
            labels: rows.iter().map(|&row| split.label(row)).collect(),
            rows: rows.len(),
            seq_len,
            indices: rows.to_vec(),
            real_tokens,
        })
    }
}

/// Cuts one global batch into `replicas` contiguous, equal parts, one per
/// data-parallel replica.
///
/// The rows must divide evenly. Each replica averages the loss over its own
/// rows and the all-reduce averages the replicas' gradients, which equals
/// the gradient of the whole batch only when every replica has the same
/// number of rows; uneven parts would silently weight some rows more, and
/// DDP would no longer match single-device training. Use a batch size that
/// is a multiple of the replicas and [`BucketSampler::multiple_of`] (or
/// `drop_last`) for the last batch.
pub fn shard(rows: &[usize], replicas: usize) -> Result<Vec<&[usize]>> {
    if replicas == 0 {
        return Err(StageError::param(
            "devices",
            "must be at least 1",
            "use 1 for a single device",
        ));
    }
    let per_replica = rows.len() / replicas;
    if per_replica * replicas != rows.len() {
        return Err(StageError::param(
            "batch_size",
            format!(
                "a batch of {} rows does not split evenly over {replicas} replicas",
                rows.len()
            ),
            format!(
                "use a batch size that is a multiple of {replicas} (devices); the last batch of an epoch \
                 is cut to a multiple of the devices when the sampler is told their number"
            ),
        ));
    }
    if per_replica == 0 {
        return Ok(vec![rows; replicas]);
    }
    Ok(rows.chunks(per_replica).collect())
}

/// Groups micro-batches into optimizer steps of `k` (gradient
/// accumulation); the last step has fewer when the epoch's batches do not
/// divide by `k`, rather than carrying micro-batches into the next epoch.
///
/// To match one large batch exactly when micro-batches differ in size,
/// scale each micro-batch's mean loss by [`micro_batch_weights`] before
/// backward.
pub fn accumulation_steps<T>(micro_batches: Vec<T>, k: usize) -> Result<Vec<Vec<T>>> {
    if k == 0 {
        return Err(StageError::param(
            "accumulate_grad_batches",
            "must be at least 1",
            "1 means no accumulation",
        ));
    }
    let mut steps = Vec::with_capacity(micro_batches.len().div_ceil(k));
    let mut items = micro_batches.into_iter().peekable();
    while items.peek().is_some() {
        steps.push(items.by_ref().take(k).collect());
    }
    Ok(steps)
}

/// The weight of each micro-batch's mean loss within one step, given the
/// rows of each micro-batch: `rows_i / sum(rows)`, so that the accumulated
/// gradient is that of the mean loss over all the step's rows.
pub fn micro_batch_weights(rows: &[usize]) -> Vec<f64> {
    let total: usize = rows.iter().sum();
    rows.iter()
        .map(|&n| {
            if total == 0 {
                0.0
            } else {
                n as f64 / total as f64
            }
        })
        .collect()
}

/// The fraction of a set of batches' positions that are padding: the cost
/// that bucketing saves.
pub fn padding_ratio(batches: &[Vec<usize>], lengths: &[usize]) -> f64 {
    let (mut real, mut padded) = (0usize, 0usize);
    for batch in batches {
        let longest = batch.iter().map(|&row| lengths[row]).max().unwrap_or(0);
        real += batch.iter().map(|&row| lengths[row]).sum::<usize>();
        padded += longest * batch.len();
    }
    if padded == 0 {
        0.0
    } else {
        1.0 - real as f64 / padded as f64
    }
}

#[cfg(test)]
mod tests;
