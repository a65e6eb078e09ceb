//! The limit on one record of untrusted input (a JSONL line, a CSV record,
//! a review in an archive): a record is read only up to the limit, so a
//! file built to expand into one enormous line costs at most the limit in
//! memory, and fails with the record's place instead of exhausting memory.

use std::io::{BufRead, Read};
use std::path::Path;

use crate::StageError;

/// The most one record may hold: 64 MiB, far above any real text (an IMDB
/// review is under 14 KB), far below what would strain a machine.
pub const MAX_RECORD_BYTES: u64 = 64 << 20;

/// `64 MiB`, for messages.
pub fn limit_text(limit: u64) -> String {
    if limit >= 1 << 20 && limit.trailing_zeros() >= 20 {
        format!("{} MiB", limit >> 20)
    } else {
        format!("{limit} bytes")
    }
}

/// The error for a line of `file` past [`MAX_RECORD_BYTES`].
pub fn line_too_long(file: &Path, line: u64) -> StageError {
    StageError::input(
        format!(
            "`{}` line {line}: the line is longer than {} (the most one record may hold)",
            file.display(),
            limit_text(MAX_RECORD_BYTES)
        ),
        "each line must be one record (JSON object) of a JSONL file; a file without line breaks, or one with a \
         huge field, is not a dataset this stage reads",
    )
}

/// What [`read_line`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// No more input.
    End,
    /// A line, in the buffer with its `\n` (none at the end of the input);
    /// the number is the bytes read.
    Read(usize),
    /// The line goes on past `limit` bytes (its `\n` not counted); the
    /// buffer holds its first `limit + 1` bytes and the rest is unread.
    TooLong,
}

/// Reads one line into `line` (cleared first), holding at most `limit + 1`
/// bytes of it.
pub fn read_line(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    limit: u64,
) -> std::io::Result<Line> {
    line.clear();
    let read = reader
        .take(limit.saturating_add(1))
        .read_until(b'\n', line)?;
    if read == 0 {
        return Ok(Line::End);
    }
    if !line.ends_with(b"\n") && read as u64 > limit {
        return Ok(Line::TooLong);
    }
    Ok(Line::Read(read))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_at_the_limit_passes_and_one_byte_more_does_not() {
        let mut line = Vec::new();
        let mut input: &[u8] = b"abcd\nabcde\nab";
        assert_eq!(read_line(&mut input, &mut line, 4).unwrap(), Line::Read(5));
        assert_eq!(line, b"abcd\n");
        assert_eq!(read_line(&mut input, &mut line, 4).unwrap(), Line::TooLong);
        assert_eq!(line, b"abcde");
        let mut last: &[u8] = b"abcd";
        assert_eq!(read_line(&mut last, &mut line, 4).unwrap(), Line::Read(4));
        assert_eq!(read_line(&mut last, &mut line, 4).unwrap(), Line::End);
        let mut long_last: &[u8] = b"abcde";
        assert_eq!(
            read_line(&mut long_last, &mut line, 4).unwrap(),
            Line::TooLong
        );
    }

    #[test]
    fn limits_read_as_people_write_them() {
        assert_eq!(limit_text(MAX_RECORD_BYTES), "64 MiB");
        assert_eq!(limit_text(1000), "1000 bytes");
    }
}
