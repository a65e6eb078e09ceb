//! The lines of a child process's output as text, whatever bytes it
//! writes.
//!
//! `BufRead::lines` ends at the first byte that is not UTF-8 (a library
//! printing Latin-1, a stray binary write): a reader looping over it stops
//! reading, the child then blocks on its full pipe, and the stage hangs.
//! It also grows a line without bound. [`TextLines`] decodes each line
//! lossily and keeps at most [`MAX_LINE_BYTES`] of it, and ends only where
//! the output does.

use std::io::{BufRead, ErrorKind};

/// The most of one line kept: a worker's event is a few hundred bytes, a
/// log line rarely more than a few KB.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Lines of `reader`, `\n` or `\r\n` ended, as lossily decoded text; the
/// part of a line past the limit is left out and counted at its end.
pub struct TextLines<R> {
    reader: R,
    limit: usize,
    ended: bool,
}

impl<R: BufRead> TextLines<R> {
    pub fn new(reader: R) -> TextLines<R> {
        TextLines::with_limit(reader, MAX_LINE_BYTES)
    }

    pub fn with_limit(reader: R, limit: usize) -> TextLines<R> {
        TextLines {
            reader,
            limit,
            ended: false,
        }
    }
}

impl<R: BufRead> Iterator for TextLines<R> {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        if self.ended {
            return None;
        }
        let mut kept = Vec::new();
        let mut left_out = 0usize;
        let mut read_any = false;
        loop {
            let (consumed, ends_line) = match self.reader.fill_buf() {
                Ok([]) => {
                    self.ended = true;
                    break;
                }
                Ok(available) => {
                    let (part, ends_line) = match available.iter().position(|&b| b == b'\n') {
                        Some(end) => (&available[..end], true),
                        None => (available, false),
                    };
                    let take = part.len().min(self.limit.saturating_sub(kept.len()));
                    kept.extend_from_slice(&part[..take]);
                    left_out += part.len() - take;
                    (part.len() + usize::from(ends_line), ends_line)
                }
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                // A pipe that fails to read has nothing more to give.
                Err(_) => {
                    self.ended = true;
                    break;
                }
            };
            read_any = true;
            self.reader.consume(consumed);
            if ends_line {
                break;
            }
        }
        if !read_any {
            return None;
        }
        if kept.last() == Some(&b'\r') && left_out == 0 {
            kept.pop();
        }
        let mut text = String::from_utf8_lossy(&kept).into_owned();
        if left_out > 0 {
            text.push_str(&format!(" … ({left_out} more bytes of this line left out)"));
        }
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(bytes: &[u8], limit: usize) -> Vec<String> {
        // A small buffer, so that lines span several reads.
        TextLines::with_limit(std::io::BufReader::with_capacity(4, bytes), limit).collect()
    }

    #[test]
    fn bytes_that_are_not_utf8_are_replaced_and_reading_goes_on() {
        assert_eq!(
            lines(b"caf\xe9 ok\n{\"event\":\"done\"}\n", 100),
            ["caf\u{fffd} ok", "{\"event\":\"done\"}"]
        );
    }

    #[test]
    fn a_line_past_the_limit_keeps_its_start_and_counts_the_rest() {
        let mut input = vec![b'x'; 25];
        input.extend_from_slice(b"\nnext\n");
        assert_eq!(
            lines(&input, 10),
            ["xxxxxxxxxx … (15 more bytes of this line left out)", "next"]
        );
    }

    #[test]
    fn line_ends_and_the_last_line_read_as_lines_does() {
        assert_eq!(lines(b"a\r\nb\n\nc", 100), ["a", "b", "", "c"]);
        assert!(lines(b"", 100).is_empty());
        assert_eq!(lines(b"\n", 100), [""]);
    }
}
