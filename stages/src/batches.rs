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
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn split_of(rows: &[Vec<u32>]) -> TokenizedSplit {
        let mut offsets = vec![0i64];
        let mut ids = Vec::new();
        for row in rows {
            ids.extend_from_slice(row);
            offsets.push(ids.len() as i64);
        }
        let labels = (0..rows.len() as i64).map(|i| i % 2).collect();
        TokenizedSplit::from_arrays(ids, &offsets, labels).expect("valid arrays")
    }

    /// Review-like lengths: mostly short, a long tail, capped as the
    /// tokenizer caps them (a log-normal, as IMDB's lengths roughly are).
    fn realistic_lengths(rows: usize, seed: u64, cap: usize) -> Vec<usize> {
        let mut rng = SplitMix64::new(seed);
        let mut uniform = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        (0..rows)
            .map(|_| {
                let (u, v) = (uniform().max(1e-12), uniform());
                let normal = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
                let length = (3.6 + 0.6 * normal).exp().round() as usize;
                length.clamp(3, cap)
            })
            .collect()
    }

    fn assert_each_row_once(batches: &[Vec<usize>], rows: &[usize]) {
        let mut seen: Vec<usize> = batches.concat();
        seen.sort_unstable();
        let mut expected = rows.to_vec();
        expected.sort_unstable();
        assert_eq!(seen, expected);
    }

    #[test]
    fn from_arrays_rejects_bad_offsets() {
        let error = |ids: Vec<u32>, offsets: &[i64], labels: Vec<i64>| {
            TokenizedSplit::from_arrays(ids, offsets, labels)
                .expect_err("must be rejected")
                .to_string()
        };
        assert!(error(vec![1, 2], &[0, 2], vec![0, 1]).contains("needs one more"));
        assert!(error(vec![1, 2], &[1, 2], vec![0]).contains("starts at 1"));
        assert!(error(vec![1, 2, 3], &[0, 2, 1, 3], vec![0, 0, 0]).contains("decreases at row 1"));
        assert!(error(vec![1, 2, 3], &[0, 2, 4], vec![0, 0]).contains("ends at 4"));
        assert!(error(vec![1, 2, 3], &[0, 1, 2], vec![0, 0]).contains("holds 3 ids"));
    }

    #[test]
    fn rows_and_labels_read_back() {
        let split = split_of(&[vec![101, 7, 102], vec![], vec![101, 102]]);
        assert_eq!(split.len(), 3);
        assert_eq!(split.sequence(0), [101, 7, 102]);
        assert_eq!(split.sequence(1), [] as [u32; 0]);
        assert_eq!(split.get(3), None);
        assert_eq!(split.lengths(), [3, 0, 2]);
        assert_eq!((split.label(0), split.label(1)), (0, 1));
        assert_eq!(split.tokens(), 5);
    }

    #[test]
    fn limit_is_seeded_in_row_order_and_all_rows_when_large() {
        let chosen = limit(100, 10, 5);
        assert_eq!(chosen, limit(100, 10, 5));
        assert_ne!(chosen, limit(100, 10, 6));
        assert_eq!(chosen.len(), 10);
        assert!(chosen.windows(2).all(|pair| pair[0] < pair[1]));
        assert_ne!(chosen, (0..10).collect::<Vec<_>>());
        assert_eq!(limit(5, 10, 1), [0, 1, 2, 3, 4]);
        assert!(limit(5, 0, 1).is_empty());
    }

    #[test]
    fn padding_and_mask_are_right_padded_to_the_longest_row() {
        let split = split_of(&[vec![101, 7, 102], vec![101, 102], vec![101, 8, 9, 10, 102]]);
        let batch = Collator::new(0).collate(&split, &[1, 0]).expect("batch");
        assert_eq!((batch.rows, batch.seq_len), (2, 3));
        assert_eq!(batch.input_ids, [101, 102, 0, 101, 7, 102]);
        assert_eq!(batch.attention_mask, [1, 1, 0, 1, 1, 1]);
        assert_eq!(batch.labels, [1, 0]);
        assert_eq!(batch.indices, [1, 0]);
        assert_eq!((batch.real_tokens, batch.padded_tokens()), (5, 6));

        let rounded = Collator::new(5).pad_to_multiple_of(4);
        let batch = rounded.collate(&split, &[2]).expect("batch");
        assert_eq!(batch.seq_len, 8);
        assert_eq!(batch.input_ids, [101, 8, 9, 10, 102, 5, 5, 5]);
        assert_eq!(batch.attention_mask, [1, 1, 1, 1, 1, 0, 0, 0]);

        let error = Collator::new(0)
            .collate(&split, &[0, 3])
            .expect_err("row 3 is out of range");
        assert!(
            error.to_string().contains("row 3 is past the end"),
            "{error}"
        );
        let error = Collator::new(0)
            .collate_to(&split, &[2], 4)
            .expect_err("too long");
        assert!(
            error.to_string().contains("5 tokens does not fit"),
            "{error}"
        );
    }

    #[test]
    fn empty_batches_and_empty_rows_do_not_panic() {
        let split = split_of(&[vec![], vec![]]);
        let batch = Collator::new(0).collate(&split, &[0, 1]).expect("batch");
        assert_eq!(
            (batch.rows, batch.seq_len, batch.input_ids.len()),
            (2, 0, 0)
        );
        let batch = Collator::new(0).collate(&split, &[]).expect("batch");
        assert_eq!((batch.rows, batch.labels.len()), (0, 0));
        assert!(BucketSampler::new(&[], 4, 1)
            .expect("sampler")
            .epoch(0)
            .is_empty());
    }

    #[test]
    fn shards_are_contiguous_equal_and_share_the_global_seq_len() {
        let split = split_of(&[vec![1; 9], vec![1; 2], vec![1; 3], vec![1; 4]]);
        let shards = Collator::new(0)
            .collate_shards(&split, &[1, 2, 0, 3], 2)
            .expect("shards");
        assert_eq!(shards.len(), 2);
        assert_eq!(shards[0].indices, [1, 2]);
        assert_eq!(shards[1].indices, [0, 3]);
        assert!(shards.iter().all(|s| s.rows == 2 && s.seq_len == 9));
        assert_eq!(shards[0].real_tokens + shards[1].real_tokens, 18);

        let error = shard(&[0, 1, 2], 2).expect_err("3 rows over 2 replicas");
        assert!(
            error.to_string().contains("does not split evenly"),
            "{error}"
        );
        assert!(shard(&[0, 1], 0).is_err());
        assert_eq!(
            shard(&[0, 1, 2, 3, 4, 5], 3).expect("even"),
            [&[0, 1][..], &[2, 3], &[4, 5]]
        );
    }

    #[test]
    fn accumulation_groups_and_weights() {
        let steps = accumulation_steps((0..7).collect(), 3).expect("steps");
        assert_eq!(steps, [vec![0, 1, 2], vec![3, 4, 5], vec![6]]);
        assert_eq!(
            accumulation_steps(vec![1, 2], 1).expect("steps"),
            [vec![1], vec![2]]
        );
        assert!(accumulation_steps(vec![1], 0).is_err());
        assert_eq!(micro_batch_weights(&[32, 32, 16]), [0.4, 0.4, 0.2]);
        assert_eq!(micro_batch_weights(&[0]), [0.0]);
    }

    #[test]
    fn epochs_are_deterministic_and_differ() {
        let lengths = realistic_lengths(1000, 3, 128);
        let sampler = BucketSampler::new(&lengths, 16, 42).expect("sampler");
        assert_eq!(sampler.epoch(0), sampler.epoch(0));
        assert_ne!(sampler.epoch(0), sampler.epoch(1));
        let other_seed = BucketSampler::new(&lengths, 16, 43).expect("sampler");
        assert_ne!(sampler.epoch(0), other_seed.epoch(0));
        assert_each_row_once(&sampler.epoch(1), &(0..1000).collect::<Vec<_>>());
        assert_eq!(sampler.epoch(0).len(), sampler.batches_per_epoch());
        let longest = lengths.iter().max().copied();
        for epoch in 0..5 {
            let first = &sampler.epoch(epoch)[0];
            assert_eq!(first.iter().map(|&row| lengths[row]).max(), longest);
        }
    }

    #[test]
    fn bucketing_pads_less_than_random_batches() {
        let lengths = realistic_lengths(5000, 11, 512);
        let rows: Vec<usize> = (0..lengths.len()).collect();
        let bucketed = BucketSampler::new(&lengths, 32, 1)
            .expect("sampler")
            .epoch(0);
        // Plain random batches: a chunk of one batch sorts nothing.
        let random = BucketSampler::new(&lengths, 32, 1)
            .expect("sampler")
            .chunk_batches(1)
            .epoch(0);
        assert_each_row_once(&random, &rows);
        let (bucketed, random) = (
            padding_ratio(&bucketed, &lengths),
            padding_ratio(&random, &lengths),
        );
        assert!(
            bucketed < random / 3.0,
            "bucketed padding {bucketed:.3} vs random {random:.3}"
        );
    }

    #[test]
    fn eval_order_is_longest_first_and_maps_back() {
        let lengths = [3, 7, 3, 1, 7];
        let sampler = EvalSampler::new(&lengths, 2).expect("sampler");
        assert_eq!(sampler.batches(), [vec![1, 4], vec![0, 2], vec![3]]);
        let order = sampler.order();
        let predictions: Vec<String> = order.iter().map(|row| format!("p{row}")).collect();
        let back = to_row_order(&order, predictions).expect("same length");
        assert_eq!(
            back.iter()
                .map(|(row, p)| (*row, p.as_str()))
                .collect::<Vec<_>>(),
            [(0, "p0"), (1, "p1"), (2, "p2"), (3, "p3"), (4, "p4")]
        );
        assert!(to_row_order(&order, vec![1]).is_err());
        let subset = EvalSampler::subset(vec![0, 3, 4], &lengths, 8).expect("sampler");
        assert_eq!(subset.batches(), [vec![4, 0, 3]]);
        assert!(EvalSampler::subset(vec![5], &lengths, 8).is_err());
        assert!(EvalSampler::new(&lengths, 0).is_err());
    }

    #[test]
    fn multiple_of_trims_only_the_short_last_batch() {
        let lengths = vec![5; 23];
        let sampler = BucketSampler::new(&lengths, 8, 9)
            .expect("sampler")
            .multiple_of(4);
        let batches = sampler.epoch(0);
        let mut sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, [4, 8, 8]);
        assert_eq!(sampler.batches_per_epoch(), 3);
        assert!(batches.iter().all(|batch| shard(batch, 4).is_ok()));
    }

    proptest! {
        #[test]
        fn sampler_invariants(
            lengths in proptest::collection::vec(0usize..600, 0..300),
            batch_size in 1usize..40,
            chunk_batches in 1usize..8,
            seed: u64,
            epoch in 0u64..1000,
            drop_last: bool,
            replicas in 1usize..5,
        ) {
            let sampler = BucketSampler::new(&lengths, batch_size, seed)
                .expect("sampler")
                .chunk_batches(chunk_batches)
                .drop_last(drop_last)
                .multiple_of(replicas);
            let batches = sampler.epoch(epoch);
            prop_assert_eq!(&batches, &sampler.epoch(epoch));
            prop_assert_eq!(batches.len(), sampler.batches_per_epoch());

            if let Some(first) = batches.first() {
                let longest = batches.iter().flatten().map(|&row| lengths[row]).max();
                prop_assert_eq!(first.iter().map(|&row| lengths[row]).max(), longest);
            }
            let mut seen = batches.concat();
            seen.sort_unstable();
            let before = seen.len();
            seen.dedup();
            prop_assert_eq!(seen.len(), before, "a row came twice");
            prop_assert!(seen.iter().all(|&row| row < lengths.len()));
            let short: Vec<usize> = batches.iter().map(Vec::len).filter(|&n| n != batch_size).collect();
            prop_assert!(short.len() <= 1);
            if let Some(&n) = short.first() {
                prop_assert!(!drop_last && n > 0 && n < batch_size && n % replicas == 0);
            }
            let missing = lengths.len() - seen.len();
            if drop_last {
                prop_assert!(missing < batch_size);
            } else {
                prop_assert!(missing < replicas);
            }
            if !drop_last && replicas == 1 {
                prop_assert_eq!(missing, 0);
            }
        }

        #[test]
        fn eval_sampler_covers_every_row_in_length_order(
            lengths in proptest::collection::vec(0usize..600, 0..300),
            batch_size in 1usize..40,
        ) {
            let sampler = EvalSampler::new(&lengths, batch_size).expect("sampler");
            let order = sampler.order();
            let mut sorted = order.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..lengths.len()).collect::<Vec<_>>());
            prop_assert!(order.windows(2).all(|pair| lengths[pair[0]] >= lengths[pair[1]]));
            let back = to_row_order(&order, order.clone()).expect("same length");
            prop_assert!(back.iter().enumerate().all(|(i, &(row, value))| i == row && row == value));
        }

        #[test]
        fn limit_picks_distinct_rows(rows in 0usize..500, n in 0usize..600, seed: u64) {
            let chosen = limit(rows, n, seed);
            prop_assert_eq!(chosen.len(), n.min(rows));
            prop_assert!(chosen.windows(2).all(|pair| pair[0] < pair[1]));
            prop_assert!(chosen.iter().all(|&row| row < rows));
        }
    }
}
