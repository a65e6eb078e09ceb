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
fn inference_batches_are_wide_longest_first_and_pad_at_most_an_eighth() {
    // Batch 2, longest row 8: at most 4 x 2 x 8 = 64 positions a batch,
    // and a new batch at the first row shorter than 7/8 of its first.
    let mut lengths = vec![8, 2, 4, 8, 2, 2, 4, 1];
    lengths.extend([2; 30]);
    let sampler = EvalSampler::for_inference(&lengths, 2).expect("sampler");
    let batches = sampler.batches();
    assert_eq!(batches[0], [0, 3]);
    assert_eq!(batches[1], [2, 6]);
    // 32 rows of 2 tokens fill the 64 positions; the 33rd starts anew.
    let twos: Vec<usize> = [1, 4, 5].into_iter().chain(8..37).collect();
    assert_eq!(batches[2], twos);
    assert_eq!(batches[3], [37]);
    assert_eq!(batches[4], [7]);
    assert_eq!(batches.len(), 5);
    assert_each_row_once(batches, &(0..lengths.len()).collect::<Vec<_>>());
    assert!(EvalSampler::for_inference(&lengths, 0).is_err());
    // Review-like lengths: several times fewer batches than of 32 rows,
    // none holding more than the positions allowed, little padding.
    let lengths = realistic_lengths(1_281, 7, 128);
    let wide = EvalSampler::for_inference(&lengths, 32).expect("sampler");
    let narrow = EvalSampler::new(&lengths, 32).expect("sampler");
    assert_each_row_once(wide.batches(), &(0..lengths.len()).collect::<Vec<_>>());
    let longest = *lengths.iter().max().unwrap();
    for batch in wide.batches() {
        let first = lengths[batch[0]];
        assert!(batch.len() * first <= 4 * 32 * longest);
        assert!(batch
            .iter()
            .all(|&row| lengths[row] <= first && 8 * lengths[row] >= 7 * first));
    }
    assert!(wide.batches().len() * 2 < narrow.batches().len());
    let padding = padding_ratio(wide.batches(), &lengths);
    assert!(padding < 0.08, "{padding}");
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
