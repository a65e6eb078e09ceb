//! `imdb/extract@1`: the Large Movie Review Dataset archive
//! (`aclImdb_v1.tar.gz`) to one JSONL dataset, read straight from the
//! compressed stream (nothing is unpacked to disk).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Component, Path};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pipe_protocol::ParamSpec;
use serde_json::{json, Value};

use crate::records::{self, MAX_RECORD_BYTES};
use crate::{
    BuiltinStage, OutputKind, OutputSpec, ParamKind, Result, StageContext, StageError, StageInfo,
};

pub struct ImdbExtract;

const TAMPERED_HINT: &str =
    "this is not the official aclImdb_v1.tar.gz or it was modified: download it again \
     and check its md5 (7c2ac02c03563afcf9b574c7e56c153a)";

/// Label written for the `unsup` reviews, which have none.
const UNLABELED: i64 = -1;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum ArchiveSplit {
    Train,
    Test,
}

impl ArchiveSplit {
    fn name(self) -> &'static str {
        match self {
            ArchiveSplit::Train => "train",
            ArchiveSplit::Test => "test",
        }
    }
}

/// Declared in output order: negative, positive, then unlabeled.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    Neg,
    Pos,
    Unsup,
}

impl Class {
    fn name(self) -> &'static str {
        match self {
            Class::Neg => "neg",
            Class::Pos => "pos",
            Class::Unsup => "unsup",
        }
    }

    fn label(self) -> i64 {
        match self {
            Class::Neg => 0,
            Class::Pos => 1,
            Class::Unsup => UNLABELED,
        }
    }
}

struct Review {
    split: ArchiveSplit,
    class: Class,
    id: u64,
    rating: u64,
    text: String,
}

/// Counts the compressed bytes read, for progress.
struct CountingReader<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.count.fetch_add(read as u64, Ordering::Relaxed);
        Ok(read)
    }
}

impl BuiltinStage for ImdbExtract {
    fn info(&self) -> StageInfo {
        StageInfo {
            name: "imdb/extract".into(),
            version: 1,
            implementation: 1,
            summary: "IMDB movie reviews (aclImdb_v1.tar.gz) to a JSONL dataset {text, label, split, rating, id}"
                .into(),
            params: vec![
                ParamSpec::new(
                    "archive",
                    ParamKind::Path,
                    None,
                    "the aclImdb_v1.tar.gz archive (read as it is, never unpacked)",
                ),
                ParamSpec::new(
                    "include_unsup",
                    ParamKind::Bool,
                    Some(json!(false)),
                    "also write the 50,000 unlabeled train/unsup reviews, with label -1",
                ),
            ],
            outputs: vec![OutputSpec {
                name: "dataset".into(),
                kind: OutputKind::File,
                doc: "JSONL, one review a line: text, label (1 pos, 0 neg, -1 unsup), split (train/test), \
                      rating (1-10, 0 for unsup), id; sorted by split (train first), label class \
                      (neg, pos, unsup), id"
                    .into(),
            }],
            metrics: vec![
                "rows".into(),
                "train.neg".into(),
                "train.pos".into(),
                "train.unsup".into(),
                "test.neg".into(),
                "test.pos".into(),
                "invalid_utf8_files".into(),
                "ignored_files".into(),
            ],
            devices_param: None,
            reads_run: false,
        }
    }

    fn run(&self, context: &StageContext) -> Result<()> {
        let archive = context.input("archive")?;
        let include_unsup = context.bool("include_unsup")?;
        let extracted = read_archive(context, &archive, include_unsup)?;
        let mut reviews = extracted.reviews;
        if reviews.iter().all(|review| review.class == Class::Unsup) {
            return Err(StageError::input(
                format!(
                    "`{}` holds no labelled reviews (expected entries such as aclImdb/train/pos/0_9.txt)",
                    archive.display()
                ),
                "pass the IMDB archive aclImdb_v1.tar.gz as `archive`",
            ));
        }
        // Tar order is fixed for one archive, but a repacked archive with the
        // same files must give the same dataset.
        reviews.sort_by_key(|review| (review.split, review.class, review.id));
        if let Some(pair) = reviews.windows(2).find(|pair| {
            (pair[0].split, pair[0].class, pair[0].id) == (pair[1].split, pair[1].class, pair[1].id)
        }) {
            let review = &pair[0];
            return Err(StageError::input(
                format!(
                    "`{}` holds review {}/{}/{} twice",
                    archive.display(),
                    review.split.name(),
                    review.class.name(),
                    review.id
                ),
                TAMPERED_HINT,
            ));
        }
        write_dataset(context, &reviews)?;

        let mut counts: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
        for split in [ArchiveSplit::Train, ArchiveSplit::Test] {
            let per_class = counts.entry(split.name()).or_default();
            per_class.insert("neg", 0);
            per_class.insert("pos", 0);
        }
        for review in &reviews {
            *counts
                .entry(review.split.name())
                .or_default()
                .entry(review.class.name())
                .or_default() += 1;
        }
        let mut metrics = json!({
            "rows": reviews.len(),
            "invalid_utf8_files": extracted.invalid_utf8,
            "ignored_files": extracted.ignored,
        });
        for (split, per_class) in &counts {
            metrics[*split] = json!(per_class);
        }
        context.write_metrics(&metrics)?;
        context.message(format!(
            "{} reviews: train {} neg / {} pos, test {} neg / {} pos{}",
            reviews.len(),
            counts["train"]["neg"],
            counts["train"]["pos"],
            counts["test"]["neg"],
            counts["test"]["pos"],
            if include_unsup {
                format!(
                    ", {} unlabeled",
                    counts["train"].get("unsup").copied().unwrap_or(0)
                )
            } else {
                String::new()
            }
        ));
        Ok(())
    }
}

struct Extracted {
    reviews: Vec<Review>,
    invalid_utf8: u64,
    ignored: u64,
}

fn read_archive(context: &StageContext, archive: &Path, include_unsup: bool) -> Result<Extracted> {
    let file = File::open(archive).map_err(|e| StageError::io(archive, e))?;
    let total = file.metadata().map(|meta| meta.len()).ok();
    let count = Arc::new(AtomicU64::new(0));
    let mut counted = BufReader::new(CountingReader {
        inner: file,
        count: count.clone(),
    });
    let compressed = {
        let head =
            std::io::BufRead::fill_buf(&mut counted).map_err(|e| StageError::io(archive, e))?;
        head.starts_with(&[0x1f, 0x8b])
    };
    // A plain .tar (someone gunzipped it) is accepted too.
    let stream: Box<dyn Read> = if compressed {
        Box::new(flate2::read::MultiGzDecoder::new(counted))
    } else {
        Box::new(counted)
    };
    let mut tar = tar::Archive::new(stream);
    let unreadable = |error: std::io::Error| {
        StageError::input(
            format!(
                "cannot read `{}` as a gzip-compressed tar archive: {error}",
                archive.display()
            ),
            "the file is truncated or not aclImdb_v1.tar.gz: download it again and check its md5",
        )
    };

    let mut extracted = Extracted {
        reviews: Vec::new(),
        invalid_utf8: 0,
        ignored: 0,
    };
    for entry in tar.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        let path = entry.path().map_err(unreadable)?.into_owned();
        let shown = pipe_protocol::excerpt(&path.display().to_string());
        check_entry_is_safe(archive, &path, entry.header().entry_type())?;
        context.progress("extract", count.load(Ordering::Relaxed), total, "bytes");
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let Some((split, class, id, rating)) = review_location(&path) else {
            if path.extension().is_some_and(|ext| ext == "txt") && in_class_dir(&path) {
                extracted.ignored += 1;
            }
            continue;
        };
        if class == Class::Unsup && !include_unsup {
            continue;
        }
        // The header's size is not trusted for the allocation, and nothing
        // past the record limit is read, whatever the header says.
        let too_large = |size: u64| {
            StageError::input(
                format!(
                    "`{}`: review `{}` holds {size} bytes, more than {} (the most one record may hold)",
                    archive.display(),
                    shown,
                    records::limit_text(MAX_RECORD_BYTES)
                ),
                TAMPERED_HINT,
            )
        };
        if entry.size() > MAX_RECORD_BYTES {
            return Err(too_large(entry.size()));
        }
        let mut bytes = Vec::with_capacity(entry.size().min(1 << 20) as usize);
        (&mut entry)
            .take(MAX_RECORD_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
        if bytes.len() as u64 > MAX_RECORD_BYTES {
            return Err(too_large(entry.size().max(bytes.len() as u64)));
        }
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(error) => {
                extracted.invalid_utf8 += 1;
                if extracted.invalid_utf8 <= 3 {
                    context.message(format!(
                        "{shown}: invalid UTF-8 replaced by U+FFFD (counted in invalid_utf8_files)"
                    ));
                }
                String::from_utf8_lossy(error.as_bytes()).into_owned()
            }
        };
        extracted.reviews.push(Review {
            split,
            class,
            id,
            rating,
            text,
        });
    }
    context.progress_done("extract", count.load(Ordering::Relaxed), "bytes");
    Ok(extracted)
}

/// Nothing here is unpacked, but a dataset built from an archive that would
/// write outside its folder or follow links is not the IMDB dataset.
fn check_entry_is_safe(archive: &Path, path: &Path, kind: tar::EntryType) -> Result<()> {
    let shown = pipe_protocol::excerpt(&path.display().to_string());
    if kind.is_symlink() || kind.is_hard_link() {
        let what = if kind.is_symlink() {
            "a symbolic link"
        } else {
            "a hard link"
        };
        return Err(StageError::input(
            format!(
                "`{}`: entry `{shown}` is {what}; refusing the archive",
                archive.display()
            ),
            TAMPERED_HINT,
        ));
    }
    if path.components().any(|part| {
        matches!(
            part,
            Component::ParentDir | Component::RootDir | Component::Prefix(_)
        )
    }) {
        return Err(StageError::input(
            format!(
                "`{}`: entry `{shown}` points outside the archive (absolute or `..`); refusing it",
                archive.display()
            ),
            TAMPERED_HINT,
        ));
    }
    Ok(())
}

fn normal_parts(path: &Path) -> Vec<&str> {
    path.components()
        .filter_map(|part| match part {
            Component::Normal(name) => name.to_str(),
            _ => None,
        })
        .collect()
}

fn parse_split(name: &str) -> Option<ArchiveSplit> {
    match name {
        "train" => Some(ArchiveSplit::Train),
        "test" => Some(ArchiveSplit::Test),
        _ => None,
    }
}

fn parse_class(name: &str) -> Option<Class> {
    match name {
        "neg" => Some(Class::Neg),
        "pos" => Some(Class::Pos),
        "unsup" => Some(Class::Unsup),
        _ => None,
    }
}

fn in_class_dir(path: &Path) -> bool {
    let parts = normal_parts(path);
    parts.len() >= 3
        && parse_split(parts[parts.len() - 3]).is_some()
        && parse_class(parts[parts.len() - 2]).is_some()
}

/// `[aclImdb/]SPLIT/CLASS/ID_RATING.txt` -> its parts.
fn review_location(path: &Path) -> Option<(ArchiveSplit, Class, u64, u64)> {
    let parts = normal_parts(path);
    if !(3..=4).contains(&parts.len()) {
        return None;
    }
    let [split, class, file] = parts[parts.len() - 3..] else {
        return None;
    };
    let split = parse_split(split)?;
    let class = parse_class(class)?;
    let (id, rating) = file.strip_suffix(".txt")?.split_once('_')?;
    let all_digits =
        |text: &str| !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit());
    if !all_digits(id) || !all_digits(rating) {
        return None;
    }
    Some((split, class, id.parse().ok()?, rating.parse().ok()?))
}

fn write_dataset(context: &StageContext, reviews: &[Review]) -> Result<()> {
    let path = context.output("dataset");
    let file = File::create(&path).map_err(|e| StageError::io(&path, e))?;
    let mut out = BufWriter::new(file);
    for (written, review) in reviews.iter().enumerate() {
        let record: Value = json!({
            "text": review.text,
            "label": review.class.label(),
            "split": review.split.name(),
            "rating": review.rating,
            "id": review.id,
        });
        let line = serde_json::to_string(&record).map_err(|e| StageError::Other(e.to_string()))?;
        out.write_all(line.as_bytes())
            .and_then(|()| out.write_all(b"\n"))
            .map_err(|e| StageError::io(&path, e))?;
        context.progress(
            "write",
            written as u64 + 1,
            Some(reviews.len() as u64),
            "rows",
        );
    }
    out.flush().map_err(|e| StageError::io(&path, e))?;
    context.progress_done("write", reviews.len() as u64, "rows");
    Ok(())
}
