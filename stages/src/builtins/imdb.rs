//! `imdb/extract@1`: the Large Movie Review Dataset archive
//! (`aclImdb_v1.tar.gz`) to one JSONL dataset, read straight from the
//! compressed stream (nothing is unpacked to disk).
//!
//! Memory stays bounded whatever the archive holds: one review at a time
//! is in memory (at most [`MAX_RECORD_BYTES`]), written as its JSON line to
//! an anonymous spill file as soon as it is read; what is sorted is each
//! line's place (32 bytes), in runs of `RUN_LEN` merged on disk
//! (`PlaceSorter`); the dataset is then copied line by line from the
//! spill file in sorted order.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, Write};
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pipe_protocol::ParamSpec;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::records::{self, MAX_RECORD_BYTES};
use crate::{
    BuiltinStage, OutputKind, ParamKind, Result, StageContext, StageError, StageInfo,
    StageInfoBuilder,
};

pub struct ImdbExtract;

/// The stage's params, one field per `ParamSpec` of its `info()`.
#[derive(Deserialize)]
struct ImdbParams {
    archive: PathBuf,
    include_unsup: bool,
}

const TAMPERED_HINT: &str =
    "this is not the official aclImdb_v1.tar.gz or it was modified: download it again \
     and check its md5 (7c2ac02c03563afcf9b574c7e56c153a)";

/// Label written for the `unsup` reviews, which have none.
const UNLABELED: i64 = -1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ArchiveSplit {
    Train,
    Test,
}

impl ArchiveSplit {
    const ALL: [ArchiveSplit; 2] = [ArchiveSplit::Train, ArchiveSplit::Test];

    fn name(self) -> &'static str {
        match self {
            ArchiveSplit::Train => "train",
            ArchiveSplit::Test => "test",
        }
    }
}

/// Declared in output order: negative, positive, then unlabeled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    Neg,
    Pos,
    Unsup,
}

impl Class {
    const ALL: [Class; 3] = [Class::Neg, Class::Pos, Class::Unsup];

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

/// What the dataset is sorted by: split (train first), class, id.
type ReviewKey = (ArchiveSplit, Class, u64);

/// One dataset line as a JSON object, fields in the order they are written;
/// the text is moved in, not copied.
fn line(text: String, split: ArchiveSplit, class: Class, rating: u64, id: u64) -> Value {
    let mut line = Map::new();
    line.insert("text".into(), Value::String(text));
    line.insert("label".into(), json!(class.label()));
    line.insert("split".into(), json!(split.name()));
    line.insert("rating".into(), json!(rating));
    line.insert("id".into(), json!(id));
    Value::Object(line)
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
        StageInfoBuilder::new(
            "imdb/extract",
            1,
            "IMDB movie reviews (aclImdb_v1.tar.gz) to a JSONL dataset {text, label, split, rating, id}",
        )
        // 2: records `label_names`.
        .implementation(2)
        .params([
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
        ])
        .output(
            "dataset",
            OutputKind::File,
            "JSONL, one review a line: text, label (1 pos, 0 neg, -1 unsup), split (train/test), \
             rating (1-10, 0 for unsup), id; sorted by split (train first), label class \
             (neg, pos, unsup), id",
        )
        .metrics([
            "rows",
            "train.neg",
            "train.pos",
            "train.unsup",
            "test.neg",
            "test.pos",
            "invalid_utf8_files",
            "ignored_files",
            "label_names.<class id>",
        ])
        .makes_data()
        .build()
    }

    fn run(&self, context: &StageContext) -> Result<()> {
        let ImdbParams {
            archive,
            include_unsup,
        } = context.params()?;
        let scratch = context.scratch_dir();
        std::fs::create_dir_all(scratch).map_err(|e| StageError::io(scratch, e))?;
        let extracted = read_archive(context, &archive, include_unsup)?;
        let rows = extracted.rows;
        let mut counts: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
        for split in ArchiveSplit::ALL {
            let per_class = counts.entry(split.name()).or_default();
            per_class.insert("neg", 0);
            per_class.insert("pos", 0);
        }
        for ((split, class), count) in &extracted.counts {
            *counts
                .entry(split.name())
                .or_default()
                .entry(class.name())
                .or_default() += count;
        }
        if extracted
            .counts
            .keys()
            .all(|(_, class)| *class == Class::Unsup)
        {
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
        let sorted = extracted
            .places
            .finish()
            .map_err(|e| StageError::io(scratch, e))?;
        write_dataset(context, &archive, &extracted.lines, sorted, rows)?;

        // For reports to name the classes of a confusion matrix.
        let label_names: serde_json::Map<String, Value> = [Class::Neg, Class::Pos]
            .map(|class| (class.label().to_string(), json!(class.name())))
            .into_iter()
            .collect();
        let mut metrics = json!({
            "rows": rows,
            "invalid_utf8_files": extracted.invalid_utf8,
            "ignored_files": extracted.ignored,
            "label_names": label_names,
        });
        for (split, per_class) in &counts {
            metrics[*split] = json!(per_class);
        }
        context.write_metrics(&metrics)?;
        context.message(format!(
            "{} reviews: train {} neg / {} pos, test {} neg / {} pos{}",
            rows,
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
    /// Every review read, as its dataset line, in tar order.
    lines: File,
    /// Where each line is in `lines`, to be sorted.
    places: PlaceSorter,
    rows: u64,
    counts: BTreeMap<(ArchiveSplit, Class), u64>,
    invalid_utf8: u64,
    ignored: u64,
}

fn read_archive(context: &StageContext, archive: &Path, include_unsup: bool) -> Result<Extracted> {
    let scratch = context.scratch_dir();
    let spill_error = |e: std::io::Error| StageError::io(scratch, e);
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

    let mut lines = BufWriter::new(tempfile::tempfile_in(scratch).map_err(spill_error)?);
    let mut places = PlaceSorter::new(scratch, RUN_LEN, FAN_IN);
    let mut rows = 0;
    let mut counts = BTreeMap::new();
    let mut invalid_utf8 = 0;
    let mut ignored = 0;
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
                ignored += 1;
            }
            continue;
        };
        if class == Class::Unsup && !include_unsup {
            continue;
        }
        // Nothing past the record limit is read, whatever the header says (a
        // sparse entry reads as more than its size); a size within the limit
        // is allocated at once, so the buffer never grows by copying.
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
        let mut bytes = Vec::with_capacity(entry.size() as usize);
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
                invalid_utf8 += 1;
                if invalid_utf8 <= 3 {
                    context.message(format!(
                        "{shown}: invalid UTF-8 replaced by U+FFFD (counted in invalid_utf8_files)"
                    ));
                }
                String::from_utf8_lossy(error.as_bytes()).into_owned()
            }
        };
        // The line goes to disk now and the text is dropped: nothing of a
        // review stays in memory but its place. `Value`'s `Display` writes
        // compact JSON as it goes (as `to_string` does, byte for byte), with
        // serde_json's escaping compiled as that crate is, optimised even in
        // a debug build.
        let offset = spill_position(&mut lines).map_err(spill_error)?;
        writeln!(lines, "{}", line(text, split, class, rating, id)).map_err(spill_error)?;
        places
            .push(Place {
                key: (split, class, id),
                offset,
                len: spill_position(&mut lines).map_err(spill_error)? - offset,
            })
            .map_err(spill_error)?;
        rows += 1;
        *counts.entry((split, class)).or_insert(0) += 1;
    }
    context.progress_done("extract", count.load(Ordering::Relaxed), "bytes");
    let lines = lines
        .into_inner()
        .map_err(|e| spill_error(e.into_error()))?;
    Ok(Extracted {
        lines,
        places,
        rows,
        counts,
        invalid_utf8,
        ignored,
    })
}

/// Where the next byte written to `lines` will be: the file's position and
/// what the buffer holds (one `lseek`, no flush).
fn spill_position(lines: &mut BufWriter<File>) -> std::io::Result<u64> {
    let buffered = lines.buffer().len() as u64;
    Ok(lines.get_mut().stream_position()? + buffered)
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

/// Copies the spilled lines into the dataset in sorted order; a review
/// that is there twice is an error, and leaves no dataset behind.
fn write_dataset(
    context: &StageContext,
    archive: &Path,
    lines: &File,
    mut sorted: SortedPlaces,
    rows: u64,
) -> Result<()> {
    let path = context.output("dataset");
    let scratch = context.scratch_dir();
    let written = (|| {
        let file = File::create(&path).map_err(|e| StageError::io(&path, e))?;
        let mut out = BufWriter::new(file);
        let mut chunk = vec![0; COPY_CHUNK];
        let mut previous: Option<ReviewKey> = None;
        let mut written = 0;
        while let Some(place) = sorted.next().map_err(|e| StageError::io(scratch, e))? {
            if previous == Some(place.key) {
                let (split, class, id) = place.key;
                return Err(StageError::input(
                    format!(
                        "`{}` holds review {}/{}/{} twice",
                        archive.display(),
                        split.name(),
                        class.name(),
                        id
                    ),
                    TAMPERED_HINT,
                ));
            }
            previous = Some(place.key);
            let mut done = 0;
            while done < place.len {
                let part = (place.len - done).min(COPY_CHUNK as u64) as usize;
                lines
                    .read_exact_at(&mut chunk[..part], place.offset + done)
                    .map_err(|e| StageError::io(scratch, e))?;
                out.write_all(&chunk[..part])
                    .map_err(|e| StageError::io(&path, e))?;
                done += part as u64;
            }
            written += 1;
            context.progress("write", written, Some(rows), "rows");
        }
        out.flush().map_err(|e| StageError::io(&path, e))?;
        Ok(written)
    })();
    match written {
        Ok(written) => {
            context.progress_done("write", written, "rows");
            Ok(())
        }
        Err(error) => {
            let _ = std::fs::remove_file(&path);
            Err(error)
        }
    }
}

/// Places sorted in memory at once: 262,144 of 32 bytes, 8 MiB (the real
/// archive's 100,000 reviews fit, so it spills no run).
const RUN_LEN: usize = 1 << 18;
/// Runs merged at once, so that at most this many run files per level are
/// open and read together.
const FAN_IN: usize = 16;
/// The buffer a line is copied through into the dataset.
const COPY_CHUNK: usize = 256 << 10;

/// Where one review's line is in the spill file, and its sort key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    key: ReviewKey,
    offset: u64,
    len: u64,
}

const PLACE_BYTES: usize = 26;

impl Place {
    fn encode(&self) -> [u8; PLACE_BYTES] {
        let (split, class, id) = self.key;
        let mut bytes = [0; PLACE_BYTES];
        bytes[0] = split as u8;
        bytes[1] = class as u8;
        bytes[2..10].copy_from_slice(&id.to_le_bytes());
        bytes[10..18].copy_from_slice(&self.offset.to_le_bytes());
        bytes[18..26].copy_from_slice(&self.len.to_le_bytes());
        bytes
    }

    fn decode(bytes: &[u8; PLACE_BYTES]) -> std::io::Result<Place> {
        let word = |at: usize| {
            let mut word = [0; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(word)
        };
        let split = ArchiveSplit::ALL.get(bytes[0] as usize);
        let class = Class::ALL.get(bytes[1] as usize);
        let (Some(split), Some(class)) = (split, class) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a run file of the sort holds a place it never wrote",
            ));
        };
        Ok(Place {
            key: (*split, *class, word(2)),
            offset: word(10),
            len: word(18),
        })
    }
}

/// Sorts places in bounded memory: `run_len` of them are sorted in memory
/// and written to an anonymous file (a run of level 0); `fan_in` runs of
/// one level are merged into one run of the next. Memory holds one buffer
/// of `run_len` places, and each level at most `fan_in` files.
struct PlaceSorter {
    dir: std::path::PathBuf,
    run_len: usize,
    fan_in: usize,
    buffer: Vec<Place>,
    levels: Vec<Vec<File>>,
}

impl PlaceSorter {
    fn new(dir: &Path, run_len: usize, fan_in: usize) -> PlaceSorter {
        PlaceSorter {
            dir: dir.to_path_buf(),
            run_len: run_len.max(1),
            fan_in: fan_in.max(2),
            buffer: Vec::new(),
            levels: Vec::new(),
        }
    }

    fn push(&mut self, place: Place) -> std::io::Result<()> {
        self.buffer.push(place);
        if self.buffer.len() >= self.run_len {
            self.spill_buffer()?;
        }
        Ok(())
    }

    fn spill_buffer(&mut self) -> std::io::Result<()> {
        self.buffer.sort_unstable();
        let mut run = BufWriter::new(tempfile::tempfile_in(&self.dir)?);
        for place in &self.buffer {
            run.write_all(&place.encode())?;
        }
        self.buffer.clear();
        let run = run.into_inner().map_err(|e| e.into_error())?;
        self.add_run(0, run)
    }

    fn add_run(&mut self, level: usize, run: File) -> std::io::Result<()> {
        let (mut level, mut run) = (level, run);
        loop {
            if self.levels.len() <= level {
                self.levels.push(Vec::new());
            }
            self.levels[level].push(run);
            if self.levels[level].len() < self.fan_in {
                return Ok(());
            }
            let runs = std::mem::take(&mut self.levels[level]);
            let mut merged = BufWriter::new(tempfile::tempfile_in(&self.dir)?);
            let mut merge = Merge::new(runs)?;
            while let Some(place) = merge.next()? {
                merged.write_all(&place.encode())?;
            }
            run = merged.into_inner().map_err(|e| e.into_error())?;
            level += 1;
        }
    }

    /// Every place pushed, in order.
    fn finish(mut self) -> std::io::Result<SortedPlaces> {
        if self.levels.is_empty() {
            self.buffer.sort_unstable();
            return Ok(SortedPlaces::InMemory(self.buffer.into_iter()));
        }
        if !self.buffer.is_empty() {
            self.spill_buffer()?;
        }
        let runs: Vec<File> = self.levels.into_iter().flatten().collect();
        Ok(SortedPlaces::Merged(Merge::new(runs)?))
    }
}

enum SortedPlaces {
    InMemory(std::vec::IntoIter<Place>),
    Merged(Merge),
}

impl SortedPlaces {
    fn next(&mut self) -> std::io::Result<Option<Place>> {
        match self {
            SortedPlaces::InMemory(places) => Ok(places.next()),
            SortedPlaces::Merged(merge) => merge.next(),
        }
    }
}

/// A k-way merge of sorted run files, holding one place of each.
struct Merge {
    runs: Vec<BufReader<File>>,
    heads: BinaryHeap<Reverse<(Place, usize)>>,
}

impl Merge {
    fn new(runs: Vec<File>) -> std::io::Result<Merge> {
        let mut merge = Merge {
            runs: Vec::with_capacity(runs.len()),
            heads: BinaryHeap::with_capacity(runs.len()),
        };
        for mut run in runs {
            run.rewind()?;
            merge.runs.push(BufReader::new(run));
            merge.advance(merge.runs.len() - 1)?;
        }
        Ok(merge)
    }

    fn advance(&mut self, run: usize) -> std::io::Result<()> {
        let mut bytes = [0; PLACE_BYTES];
        match self.runs[run].read_exact(&mut bytes) {
            Ok(()) => {
                self.heads.push(Reverse((Place::decode(&bytes)?, run)));
                Ok(())
            }
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => Ok(()),
            Err(error) => Err(error),
        }
    }

    fn next(&mut self) -> std::io::Result<Option<Place>> {
        let Some(Reverse((place, run))) = self.heads.pop() else {
            return Ok(None);
        };
        self.advance(run)?;
        Ok(Some(place))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn places(count: u64, seed: u64) -> Vec<Place> {
        let mut state = seed;
        (0..count)
            .map(|at| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let split = ArchiveSplit::ALL[(state >> 60) as usize % 2];
                let class = Class::ALL[(state >> 50) as usize % 3];
                Place {
                    key: (split, class, (state >> 20) % 1000),
                    offset: at * 7,
                    len: state % 5000,
                }
            })
            .collect()
    }

    fn sorted(sorter: PlaceSorter) -> Vec<Place> {
        let mut sorted = sorter.finish().unwrap();
        let mut all = Vec::new();
        while let Some(place) = sorted.next().unwrap() {
            all.push(place);
        }
        all
    }

    #[test]
    fn places_sort_the_same_in_memory_and_through_many_levels_of_runs() {
        let dir = tempfile::tempdir().unwrap();
        for (count, run_len, fan_in) in [
            (0, 4, 2),
            (1, 4, 2),
            (3, 4, 2),
            (4, 4, 2),
            (100, 4, 2),
            (1000, 7, 3),
            (1000, 1000, 16),
            (5000, 16, 4),
        ] {
            let input = places(count, count + run_len as u64);
            let mut sorter = PlaceSorter::new(dir.path(), run_len, fan_in);
            for place in &input {
                sorter.push(*place).unwrap();
            }
            let mut expected = input.clone();
            expected.sort();
            assert_eq!(
                sorted(sorter),
                expected,
                "{count} places, runs of {run_len}"
            );
        }
    }

    #[test]
    fn a_place_survives_its_encoding() {
        for place in places(50, 9) {
            assert_eq!(Place::decode(&place.encode()).unwrap(), place);
        }
        let mut bad = places(1, 1)[0].encode();
        bad[1] = 9;
        assert!(Place::decode(&bad).is_err());
    }
}
