//! What the training input pipeline costs per batch, to set against a
//! training step (docs/performance.md, "Training input pipeline").
//!
//! cargo run --release -p pipe-stages --example batch_throughput
//!
//! Synthetic data, so it needs no download: 25,000 rows (IMDB's training
//! split) with review-like lengths, written as a tokenize file and read
//! back, then sampled and padded as a training epoch does.

use std::hint::black_box;
use std::time::Instant;

use pipe_stages::batches::{padding_ratio, BucketSampler, Collator};
use pipe_stages::rng::SplitMix64;
use pipe_stages::token_file::TokenizedSplit;
use safetensors::tensor::TensorView;
use safetensors::Dtype;

const ROWS: usize = 25_000;
const BATCH: usize = 32;

/// Log-normal lengths around 37 tokens with a long tail, as short reviews
/// have (Rotten Tomatoes snippets) and capped as the tokenizer caps them.
fn lengths(cap: usize, median: f64) -> Vec<usize> {
    let mut rng = SplitMix64::new(7);
    let mut uniform = || (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (0..ROWS)
        .map(|_| {
            let (u, v) = (uniform().max(1e-12), uniform());
            let normal = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
            ((median.ln() + 0.6 * normal).exp().round() as usize).clamp(3, cap)
        })
        .collect()
}

fn write_split(path: &std::path::Path, lengths: &[usize]) {
    let mut rng = SplitMix64::new(1);
    let mut offsets = vec![0i64];
    let mut ids = Vec::new();
    for &length in lengths {
        ids.extend((0..length).map(|_| rng.below(30_522) as u32));
        offsets.push(ids.len() as i64);
    }
    let labels: Vec<i64> = (0..lengths.len() as i64).map(|i| i % 2).collect();
    let bytes = |values: Vec<[u8; 8]>| values.concat();
    let labels = bytes(labels.iter().map(|v| v.to_le_bytes()).collect());
    let offsets_bytes = bytes(offsets.iter().map(|v| v.to_le_bytes()).collect());
    let ids_bytes: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
    let tensors = [
        (
            "labels",
            TensorView::new(Dtype::I64, vec![lengths.len()], &labels),
        ),
        (
            "offsets",
            TensorView::new(Dtype::I64, vec![lengths.len() + 1], &offsets_bytes),
        ),
        (
            "input_ids",
            TensorView::new(Dtype::U32, vec![ids.len()], &ids_bytes),
        ),
    ]
    .map(|(name, view)| (name, view.expect("consistent shapes")));
    let file = safetensors::serialize(tensors, None).expect("serializable");
    std::fs::write(path, file).expect("writable temporary directory");
}

/// The median of `runs` timings of `f`, in microseconds.
fn median_us(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[runs / 2]
}

fn report(cap: usize, median: f64) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("train.safetensors");
    write_split(&path, &lengths(cap, median));
    let open = median_us(5, || {
        black_box(TokenizedSplit::open(&path).expect("valid file"));
    });
    let split = TokenizedSplit::open(&path).expect("valid file");
    let lengths = split.lengths();
    let sampler = BucketSampler::new(&lengths, BATCH, 123).expect("sampler");
    let random = sampler.clone().chunk_batches(1);
    let epoch = median_us(11, || {
        black_box(sampler.epoch(3));
    });
    let batches = sampler.epoch(0);
    let collator = Collator::new(0);
    let collate_epoch = median_us(5, || {
        for batch in &batches {
            black_box(collator.collate(&split, batch).expect("rows exist"));
        }
    });
    // The worst case for one batch: 32 rows all padded to `cap`.
    let longest: Vec<usize> = (0..ROWS)
        .filter(|&r| lengths[r] == cap)
        .take(BATCH)
        .collect();
    let full = median_us(1001, || {
        black_box(collator.collate(&split, &longest).expect("rows exist"));
    });
    let shards = median_us(1001, || {
        black_box(collator.collate_shards(&split, &longest, 2).expect("even"));
    });
    println!(
        "max_length {cap}: {} rows, {} tokens; open {:.1} ms; one epoch's batches {:.2} ms ({:.2} us/batch); \
         padding all batches of an epoch {:.1} ms ({:.2} us/batch); one {BATCH}x{cap} batch {:.1} us, \
         as 2 shards {:.1} us; padded positions: bucketed {:.1}%, random {:.1}%",
        split.len(),
        split.tokens(),
        open / 1e3,
        epoch / 1e3,
        epoch / batches.len() as f64,
        collate_epoch / 1e3,
        collate_epoch / batches.len() as f64,
        full,
        shards,
        100.0 * padding_ratio(&batches, &lengths),
        100.0 * padding_ratio(&random.epoch(0), &lengths),
    );
}

fn main() {
    report(128, 37.0);
    report(512, 230.0);
}
