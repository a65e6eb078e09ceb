//! Reading the table: decompressed, with no record allowed to grow past
//! `MAX_RECORD_BYTES`, and errors that say where in the file they are.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::records::{self, MAX_RECORD_BYTES};
use crate::{Result, StageError};

/// The table's records, read through the size limit, with where each
/// starts for the errors.
pub(super) struct Table<'a> {
    file: &'a Path,
    reader: csv::Reader<RecordLimit>,
    /// Bytes read from the file as it is stored (compressed or not), for
    /// progress.
    count: Arc<AtomicU64>,
    /// Where the record being read starts, for `RecordLimit`.
    record_start: Arc<AtomicU64>,
    /// The line the record being read starts on, for a record too large.
    record_line: u64,
}

impl<'a> Table<'a> {
    pub(super) fn open(file: &'a Path, delimiter: u8) -> Result<Table<'a>> {
        let count = Arc::new(AtomicU64::new(0));
        let record_start = Arc::new(AtomicU64::new(0));
        let stream = RecordLimit {
            inner: open_decompressed(file, count.clone())?,
            delivered: 0,
            record_start: record_start.clone(),
            limit: MAX_RECORD_BYTES,
        };
        let reader = csv::ReaderBuilder::new()
            .delimiter(delimiter)
            .has_headers(false)
            .flexible(false)
            .from_reader(stream);
        Ok(Table {
            file,
            reader,
            count,
            record_start,
            record_line: 1,
        })
    }

    /// Reads the next record into `record`; false at the end.
    pub(super) fn next(&mut self, record: &mut csv::ByteRecord) -> Result<bool> {
        let more = self
            .reader
            .read_byte_record(record)
            .map_err(|error| describe_csv_error(self.file, error, self.record_line))?;
        let position = self.reader.position();
        self.record_start.store(position.byte(), Ordering::Relaxed);
        self.record_line = position.line();
        Ok(more)
    }

    /// The column names, from the first record: the header's, or their
    /// positions (`0`, `1`, ...) when the table has none.
    pub(super) fn columns(
        &mut self,
        record: &mut csv::ByteRecord,
        has_header: bool,
    ) -> Result<Vec<String>> {
        if !self.next(record)? {
            return Err(StageError::input(
                format!("`{}` is empty", self.file.display()),
                "pass a non-empty table",
            ));
        }
        if !has_header {
            return Ok((0..record.len()).map(|index| index.to_string()).collect());
        }
        Ok(record
            .iter()
            .enumerate()
            .map(|(index, name)| {
                let name = String::from_utf8_lossy(name);
                // Spreadsheet exports often start with a byte order mark.
                let name = if index == 0 {
                    name.trim_start_matches('\u{feff}')
                } else {
                    &name
                };
                name.trim().to_string()
            })
            .collect())
    }

    pub(super) fn bytes_read(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// Counts the bytes read from the file itself (compressed), for progress.
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

fn open_decompressed(file: &Path, count: Arc<AtomicU64>) -> Result<Box<dyn Read>> {
    let opened = File::open(file).map_err(|e| StageError::io(file, e))?;
    let mut buffered = BufReader::new(CountingReader {
        inner: opened,
        count,
    });
    let head = buffered.fill_buf().map_err(|e| StageError::io(file, e))?;
    // Magic bytes first: a downloaded file's name does not always tell.
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::bufread::MultiGzDecoder::new(buffered))
    } else if head.starts_with(b"BZh") {
        Box::new(bzip2::bufread::MultiBzDecoder::new(buffered))
    } else {
        Box::new(buffered)
    })
}

/// Hands the CSV reader the decompressed stream, but fails once the record
/// being read has grown past `limit` bytes: the reader would otherwise
/// keep one unterminated record (an unclosed quote, a file without line
/// breaks) whole in memory.
struct RecordLimit {
    inner: Box<dyn Read>,
    delivered: u64,
    /// Where the record being read starts, as the CSV reader counts bytes.
    record_start: Arc<AtomicU64>,
    limit: u64,
}

/// The error [`RecordLimit`] fails with, recognised in `describe_csv_error`.
#[derive(Debug)]
struct RecordTooLarge;

impl std::fmt::Display for RecordTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "record too large")
    }
}

impl std::error::Error for RecordTooLarge {}

impl Read for RecordLimit {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let in_record = self.delivered
            - self
                .record_start
                .load(Ordering::Relaxed)
                .min(self.delivered);
        if in_record > self.limit {
            return Err(std::io::Error::other(RecordTooLarge));
        }
        let read = self.inner.read(buf)?;
        self.delivered += read as u64;
        Ok(read)
    }
}

fn describe_csv_error(file: &Path, error: csv::Error, record_line: u64) -> StageError {
    let line = error.position().map(|position| position.line());
    let described = error.to_string();
    match error.into_kind() {
        csv::ErrorKind::Io(source)
            if source
                .get_ref()
                .is_some_and(|inner| inner.is::<RecordTooLarge>()) =>
        {
            StageError::input(
                format!(
                    "`{}` line {record_line}: the record starting here is larger than {} (the most one record may \
                     hold)",
                    file.display(),
                    records::limit_text(MAX_RECORD_BYTES)
                ),
                "a quote that is never closed makes the rest of the file one field, and a file without line breaks \
                 is one record: check the quoting from that line on, and `delimiter:`",
            )
        }
        csv::ErrorKind::UnequalLengths {
            pos,
            expected_len,
            len,
        } => {
            let line = pos.map(|position| position.line()).or(line).unwrap_or(0);
            StageError::input(
                format!(
                    "`{}` line {line}: the row has {len} fields, the first row has {expected_len}",
                    file.display()
                ),
                "a field that holds the delimiter, a quote or a newline must be quoted (\"a, b\"); check `delimiter:` \
                 too",
            )
        }
        csv::ErrorKind::Io(source) => StageError::input(
            format!(
                "cannot read `{}`{}: {source}",
                file.display(),
                line.map(|line| format!(" (near line {line})"))
                    .unwrap_or_default()
            ),
            "the file is truncated or its compression is damaged: download or export it again",
        ),
        _ => StageError::input(
            format!(
                "`{}`{}: {described}",
                file.display(),
                line.map(|line| format!(" line {line}")).unwrap_or_default(),
            ),
            "check that the file is a CSV/TSV table and that `delimiter:` matches it",
        ),
    }
}
