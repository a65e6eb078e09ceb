//! `data/split@1`: a JSONL dataset to seeded train/val/test files, by
//! counts or fractions, optionally stratified by label.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use pipe_protocol::{ParamRule, ParamSpec};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::records::{self, Line, MAX_RECORD_BYTES};
use crate::rng::SplitMix64;
use crate::{
    BuiltinStage, OutputKind, ParamKind, Result, StageContext, StageError, StageInfo,
    StageInfoBuilder,
};

pub struct Split;

/// The stage's params, one field per `ParamSpec` of its `info()`.
#[derive(Deserialize)]
struct SplitParams {
    dataset: PathBuf,
    /// Each a count or a fraction, or null: which, decides how all three
    /// are read (`read_sizes`).
    train: Value,
    val: Value,
    test: Value,
    seed: Option<u64>,
    stratify: bool,
}

const SPLITS: [&str; 3] = ["train", "val", "test"];

/// Where one line of the dataset is, and its label: all that is kept in
/// memory; the lines themselves are copied from the file when written.
struct Row {
    offset: u64,
    length: u32,
    label: Option<i64>,
}

#[derive(Deserialize)]
struct LabelOnly {
    #[serde(default)]
    label: Value,
}

impl BuiltinStage for Split {
    fn info(&self) -> StageInfo {
        let size_doc = |split: &str| {
            format!(
                "rows in `{split}`: a count (e.g. 5000) or a fraction (e.g. 0.1); all sizes are counts or all are \
                 fractions; unset: 0"
            )
        };
        let size = |split: &str| {
            ParamSpec::new(
                split,
                ParamKind::Number,
                Some(Value::Null),
                &size_doc(split),
            )
            .at_least(0.0)
        };
        StageInfoBuilder::new(
            "data/split",
            1,
            "a JSONL dataset to seeded train/val/test files, by counts or fractions, optionally stratified",
        )
        .params([
            ParamSpec::new(
                "dataset",
                ParamKind::Path,
                None,
                "the JSONL dataset to split (one record a line)",
            ),
            size("train"),
            size("val"),
            size("test"),
            ParamSpec::seed("shuffle seed; unset: the pipeline's `seed` param"),

            ParamSpec::new(
                "stratify",
                ParamKind::Bool,
                Some(json!(false)),
                "keep each label's share the same in every split (needs an integer `label` in every record)",
            ),
        ])
        .rule(ParamRule::Parts {
            params: SPLITS.map(String::from).to_vec(),
            whole: 1.0,
        })
        .output(
            "dataset",
            OutputKind::Dir,
            "`train.jsonl`, `val.jsonl`, `test.jsonl`: the records, lines copied as they are, in shuffled order",
        )
        .metrics([
            "rows",
            "unused",
            "train.rows",
            "train.labels.<label>",
            "val.rows",
            "val.labels.<label>",
            "test.rows",
            "test.labels.<label>",
        ])
        .seed_param("seed")
        .makes_data()
        .build()
    }

    fn run(&self, context: &StageContext) -> Result<()> {
        let params: SplitParams = context.params()?;
        let dataset = params.dataset;
        let sizes = read_sizes([&params.train, &params.val, &params.test])?;
        let seed = params.seed.ok_or_else(|| {
            StageError::param(
                "seed",
                "is not set and the pipeline has no seed",
                "set `seed: 42` under `with:`, or a `seed` param for the whole pipeline",
            )
        })?;
        let stratify = params.stratify;

        let rows = index_rows(context, &dataset, stratify)?;
        let total = rows.len() as u64;
        let counts = sizes.counts(total, &dataset)?;
        let mut rng = SplitMix64::new(seed);
        let assignment = if stratify {
            stratified(&rows, counts, &mut rng)?
        } else {
            unstratified(total as usize, counts, &mut rng)
        };

        let mut source = File::open(&dataset).map_err(|e| StageError::io(&dataset, e))?;
        let mut metrics = Map::new();
        metrics.insert("rows".into(), json!(total));
        metrics.insert("unused".into(), json!(total - counts.iter().sum::<u64>()));
        let mut written = 0u64;
        let mut line = Vec::new();
        let output_dir = context.output("dataset");
        std::fs::create_dir_all(&output_dir).map_err(|e| StageError::io(&output_dir, e))?;
        for (split, indices) in SPLITS.iter().zip(&assignment) {
            let path = output_dir.join(format!("{split}.jsonl"));
            let mut out =
                BufWriter::new(File::create(&path).map_err(|e| StageError::io(&path, e))?);
            let mut per_label: BTreeMap<String, u64> = BTreeMap::new();
            for &index in indices {
                let row = &rows[index];
                line.resize(row.length as usize, 0);
                source
                    .seek(SeekFrom::Start(row.offset))
                    .and_then(|_| source.read_exact(&mut line))
                    .map_err(|e| StageError::io(&dataset, e))?;
                out.write_all(&line)
                    .and_then(|()| out.write_all(b"\n"))
                    .map_err(|e| StageError::io(&path, e))?;
                let label = row
                    .label
                    .map_or_else(|| "none".to_string(), |label| label.to_string());
                *per_label.entry(label).or_default() += 1;
                written += 1;
                context.progress("write", written, Some(total), "rows");
            }
            out.flush().map_err(|e| StageError::io(&path, e))?;
            metrics.insert(
                (*split).into(),
                json!({ "rows": indices.len(), "labels": per_label }),
            );
        }
        context.progress_done("write", written, "rows");
        context.message(format!(
            "{total} rows -> train {}, val {}, test {}{}",
            assignment[0].len(),
            assignment[1].len(),
            assignment[2].len(),
            if stratify { " (stratified)" } else { "" }
        ));
        context.write_metrics(&Value::Object(metrics))
    }
}

enum Sizes {
    Counts([u64; 3]),
    Fractions([f64; 3]),
}

/// The sizes of `SPLITS`, in its order, as their params give them.
fn read_sizes(values: [&Value; 3]) -> Result<Sizes> {
    let hint = "give all sizes as counts (train: 35000, val: 5000, test: 10000) or all as fractions that sum to 1 \
                (train: 0.7, val: 0.1, test: 0.2)";
    if values.iter().all(|value| value.is_null()) {
        return Err(StageError::param("train", "no split size is set", hint));
    }
    for (split, value) in SPLITS.iter().zip(&values) {
        if value
            .as_f64()
            .is_some_and(|number| number < 0.0 || !number.is_finite())
        {
            return Err(StageError::param(
                split,
                format!("must be >= 0, not {value}"),
                hint,
            ));
        }
    }
    let set: Vec<&&Value> = values.iter().filter(|value| !value.is_null()).collect();
    if set.iter().all(|value| value.is_u64()) {
        let counts = [0, 1, 2].map(|index| values[index].as_u64().unwrap_or(0));
        if counts.iter().all(|&count| count == 0) {
            let first_set = values
                .iter()
                .position(|value| !value.is_null())
                .unwrap_or(0);
            return Err(StageError::param(
                SPLITS[first_set],
                "every split size is 0, so every split would be empty",
                "give at least one split a count above 0 (train: 35000), or give fractions that sum to 1",
            ));
        }
        return Ok(Sizes::Counts(counts));
    }
    if let Some(position) = values
        .iter()
        .position(|value| value.is_u64() && value.as_u64() != Some(0))
    {
        return Err(StageError::param(
            SPLITS[position],
            format!(
                "is a count ({}) while another size is a fraction",
                values[position]
            ),
            hint,
        ));
    }
    let fractions = [0, 1, 2].map(|index| values[index].as_f64().unwrap_or(0.0));
    let sum: f64 = fractions.iter().sum();
    if (sum - 1.0).abs() > 1e-6 {
        return Err(StageError::param(
            "train",
            format!(
                "the fractions sum to {sum}, not 1 (train {}, val {}, test {})",
                fractions[0], fractions[1], fractions[2]
            ),
            hint,
        ));
    }
    Ok(Sizes::Fractions(fractions))
}

impl Sizes {
    /// Rows per split. With fractions every row is used.
    fn counts(&self, total: u64, dataset: &Path) -> Result<[u64; 3]> {
        match self {
            Sizes::Counts(counts) => {
                // In u128: three counts near u64::MAX must not wrap around
                // to a small sum.
                let wanted: u128 = counts.iter().map(|&count| u128::from(count)).sum();
                if wanted > u128::from(total) {
                    return Err(StageError::input(
                        format!(
                            "train {} + val {} + test {} = {wanted} rows, but `{}` has only {total}",
                            counts[0],
                            counts[1],
                            counts[2],
                            dataset.display()
                        ),
                        "lower the counts, or give fractions (train: 0.8, val: 0.1, test: 0.1)",
                    ));
                }
                Ok(*counts)
            }
            Sizes::Fractions(fractions) => {
                // Cut points at the floor of the cumulative fractions, as
                // `rows[:int(.7*n)]`, `rows[int(.7*n):int(.8*n)]`, `rows[int(.8*n):]`
                // in a hand-written script: 12,808 rows at 70/10/20 give
                // 8,965 / 1,281 / 2,562. The epsilon keeps 0.29 * 100
                // (28.999999999999996) at 29.
                let cut = |fraction: f64| {
                    ((fraction * total as f64) + 1e-9).floor().min(total as f64) as u64
                };
                let train = cut(fractions[0]);
                let train_and_val = cut(fractions[0] + fractions[1]).max(train);
                Ok([train, train_and_val - train, total - train_and_val])
            }
        }
    }
}

fn index_rows(context: &StageContext, dataset: &Path, stratify: bool) -> Result<Vec<Row>> {
    let file = File::open(dataset).map_err(|e| StageError::io(dataset, e))?;
    let size = file.metadata().map(|meta| meta.len()).ok();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut rows = Vec::new();
    let mut buffer = Vec::new();
    let mut offset = 0u64;
    let mut line_number = 0u64;
    loop {
        line_number += 1;
        let read = match records::read_line(&mut reader, &mut buffer, MAX_RECORD_BYTES)
            .map_err(|e| StageError::io(dataset, e))?
        {
            Line::End => break,
            Line::Read(read) => read,
            Line::TooLong => return Err(records::line_too_long(dataset, line_number)),
        };
        let start = offset;
        offset += read as u64;
        let mut content = buffer.as_slice();
        if let Some(stripped) = content.strip_suffix(b"\n") {
            content = stripped;
        }
        if let Some(stripped) = content.strip_suffix(b"\r") {
            content = stripped;
        }
        if content.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let bad_line = |problem: String| {
            StageError::input(
                format!("`{}` line {line_number}: {problem}", dataset.display()),
                "the dataset must be JSONL, one object such as {\"text\": \"...\", \"label\": 0} a line, as \
                 imdb/extract and data/from-csv write it",
            )
        };
        let parsed: LabelOnly = serde_json::from_slice(content)
            .map_err(|error| bad_line(format!("not a JSON object ({error})")))?;
        let label = match parsed.label {
            Value::Null if !stratify => None,
            value => Some(value.as_i64().ok_or_else(|| {
                bad_line(if value.is_null() {
                    "no integer `label`, which `stratify: true` needs".to_string()
                } else {
                    format!(
                        "`label` is {}, not an integer",
                        pipe_protocol::excerpt(&value.to_string())
                    )
                })
            })?),
        };
        let length = u32::try_from(content.len())
            .map_err(|_| bad_line("the line is longer than 4 GiB".into()))?;
        rows.push(Row {
            offset: start,
            length,
            label,
        });
        context.progress("read", offset, size, "bytes");
    }
    context.progress_done("read", offset, "bytes");
    Ok(rows)
}

/// Row indices per split, in the order they are written.
fn unstratified(total: usize, counts: [u64; 3], rng: &mut SplitMix64) -> [Vec<usize>; 3] {
    let mut order: Vec<usize> = (0..total).collect();
    rng.shuffle(&mut order);
    let mut rest = order.as_slice();
    [0, 1, 2].map(|split| {
        let (taken, remaining) = rest.split_at(counts[split] as usize);
        rest = remaining;
        taken.to_vec()
    })
}

/// Each label's rows are shuffled (labels in ascending order) and cut into
/// the splits by `apportion`; each split is then shuffled so the labels are
/// mixed.
fn stratified(rows: &[Row], counts: [u64; 3], rng: &mut SplitMix64) -> Result<[Vec<usize>; 3]> {
    let mut by_label: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (index, row) in rows.iter().enumerate() {
        by_label
            .entry(row.label.unwrap_or_default())
            .or_default()
            .push(index);
    }
    let total = rows.len() as u64;
    let unused = total - counts.iter().sum::<u64>();
    let split_sizes = [counts[0], counts[1], counts[2], unused];
    let label_sizes: Vec<u64> = by_label
        .values()
        .map(|indices| indices.len() as u64)
        .collect();
    let table = apportion(&split_sizes, &label_sizes).ok_or_else(|| {
        StageError::Other(format!(
            "internal: no stratified split of labels {label_sizes:?} into {split_sizes:?}; please report it"
        ))
    })?;
    let mut splits: [Vec<usize>; 3] = Default::default();
    for (column, indices) in by_label.values_mut().enumerate() {
        rng.shuffle(indices);
        let mut rest = indices.as_slice();
        for (split, chosen) in splits.iter_mut().enumerate() {
            let (taken, remaining) = rest.split_at(table[split][column] as usize);
            rest = remaining;
            chosen.extend_from_slice(taken);
        }
    }
    for chosen in &mut splits {
        rng.shuffle(chosen);
    }
    Ok(splits)
}

/// Rows of each label in each split: `table[s][l]` is the floor or the
/// ceiling of the ideal share `split_sizes[s] * label_sizes[l] / total`, with
/// rows summing to `split_sizes` and columns to `label_sizes` exactly (a
/// controlled rounding). The floors are taken first; the leftover rows go
/// one per cell, largest fractional part first, and when that greedy pass
/// gets stuck, augmenting paths move leftovers between cells until every
/// split and label is complete. A solution always exists (the fractional
/// parts are one), so `None` would be a bug.
fn apportion(split_sizes: &[u64], label_sizes: &[u64]) -> Option<Vec<Vec<u64>>> {
    let total: u64 = label_sizes.iter().sum();
    let (splits, labels) = (split_sizes.len(), label_sizes.len());
    if total == 0 {
        return Some(vec![vec![0; labels]; splits]);
    }
    let product =
        |split: usize, label: usize| split_sizes[split] as u128 * label_sizes[label] as u128;
    let mut table: Vec<Vec<u64>> = (0..splits)
        .map(|split| {
            (0..labels)
                .map(|label| (product(split, label) / total as u128) as u64)
                .collect()
        })
        .collect();
    let mut split_need: Vec<u64> = (0..splits)
        .map(|split| split_sizes[split] - table[split].iter().sum::<u64>())
        .collect();
    let mut label_need: Vec<u64> = (0..labels)
        .map(|label| label_sizes[label] - table.iter().map(|row| row[label]).sum::<u64>())
        .collect();

    // A whole ideal share is never rounded up: each cell stays the floor or
    // the ceiling of its ideal.
    let fractional = |split: usize, label: usize| product(split, label) % total as u128 != 0;
    let mut extra = vec![vec![false; labels]; splits];
    let mut cells: Vec<(usize, usize)> = (0..splits)
        .flat_map(|split| (0..labels).map(move |label| (split, label)))
        .collect();
    cells.sort_by_key(|&(split, label)| {
        (
            std::cmp::Reverse(product(split, label) % total as u128),
            split,
            label,
        )
    });
    for (split, label) in cells {
        if split_need[split] > 0 && label_need[label] > 0 && fractional(split, label) {
            extra[split][label] = true;
            split_need[split] -= 1;
            label_need[label] -= 1;
        }
    }
    while split_need.iter().any(|&need| need > 0) {
        // Breadth-first from every split that still needs rows: a split
        // reaches a label through a cell without a leftover, a label reaches
        // the splits holding one of its leftovers, until a label that still
        // needs rows is found; then the leftovers along the path shift by one.
        let mut reached_label_from: Vec<Option<usize>> = vec![None; labels];
        let mut reached_split_from: Vec<Option<usize>> = vec![None; splits];
        let mut visited: Vec<bool> = split_need.iter().map(|&need| need > 0).collect();
        let mut queue: std::collections::VecDeque<usize> =
            (0..splits).filter(|&split| visited[split]).collect();
        let mut end = None;
        'search: while let Some(split) = queue.pop_front() {
            for label in 0..labels {
                if extra[split][label]
                    || !fractional(split, label)
                    || reached_label_from[label].is_some()
                {
                    continue;
                }
                reached_label_from[label] = Some(split);
                if label_need[label] > 0 {
                    end = Some(label);
                    break 'search;
                }
                for other in 0..splits {
                    if extra[other][label] && !visited[other] {
                        visited[other] = true;
                        reached_split_from[other] = Some(label);
                        queue.push_back(other);
                    }
                }
            }
        }
        let mut label = end?;
        label_need[label] -= 1;
        loop {
            let split = reached_label_from[label]?;
            extra[split][label] = true;
            match reached_split_from[split] {
                Some(previous) => {
                    extra[split][previous] = false;
                    label = previous;
                }
                None => {
                    split_need[split] -= 1;
                    break;
                }
            }
        }
    }
    for (row, extras) in table.iter_mut().zip(&extra) {
        for (cell, &more) in row.iter_mut().zip(extras) {
            *cell += u64::from(more);
        }
    }
    Some(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apportion_rounds_every_share_and_keeps_every_sum() {
        let mut rng = SplitMix64::new(99);
        for _ in 0..2000 {
            let labels = 1 + rng.below(6) as usize;
            let label_sizes: Vec<u64> = (0..labels).map(|_| rng.below(40)).collect();
            let total: u64 = label_sizes.iter().sum();
            let mut split_sizes = vec![0; 4];
            for _ in 0..total {
                split_sizes[rng.below(4) as usize] += 1;
            }
            let table = apportion(&split_sizes, &label_sizes).expect("a rounding exists");
            for (split, row) in table.iter().enumerate() {
                assert_eq!(row.iter().sum::<u64>(), split_sizes[split]);
                for (label, &cell) in row.iter().enumerate() {
                    let ideal = split_sizes[split] as u128 * label_sizes[label] as u128;
                    let floor = ideal / total.max(1) as u128;
                    let exact = floor * total.max(1) as u128 == ideal;
                    assert!(
                        cell as u128 == floor || (!exact && cell as u128 == floor + 1),
                        "{table:?}"
                    );
                }
            }
            for (label, &size) in label_sizes.iter().enumerate() {
                assert_eq!(table.iter().map(|row| row[label]).sum::<u64>(), size);
            }
        }
    }

    #[test]
    fn apportion_prefers_the_largest_fractional_parts() {
        // Rotten Tomatoes, 80/10/10: the ideal shares are 5923.3/4324.7,
        // 739.9/540.1, 739.9/540.1.
        let table = apportion(&[10248, 1280, 1280, 0], &[7403, 5405]).unwrap();
        assert_eq!(
            table,
            vec![vec![5923, 4325], vec![740, 540], vec![740, 540], vec![0, 0]]
        );
    }
}
