//! The last line a running command stage wrote, as it writes it: the
//! command's output goes to its log file (so that nothing is lost and the
//! command sees no pipe), and this reads what is appended while it runs,
//! so that a terminal shows `get  downloading chunk 3/7` beside the stage
//! and a CI log an occasional line, as Snakemake and DVC users see them.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::events::{Event, Observer};

/// How often the log is looked at.
const POLL: Duration = Duration::from_millis(250);
/// Read at most this much per look: a stage that writes faster is shown
/// by its newest lines, and the rest stays in its log.
const MAX_READ: u64 = 64 * 1024;
/// A line is shown cut to this many characters.
const MAX_LINE: usize = 200;

/// Until `done` (and an `unpark` of its thread), emits `StageOutput` with the newest complete line of the
/// log at `path` whenever it changed since the last look.
pub(super) fn follow(
    observer: Observer<'_>,
    stage: &crate::pipeline::Stage,
    path: &Path,
    done: &AtomicBool,
) {
    let Ok(mut log) = File::open(path) else {
        return;
    };
    let mut offset = 0u64;
    let mut shown = String::new();
    loop {
        // Woken early when the stage ends (`unpark`): a stage of a few
        // milliseconds waits for no poll.
        std::thread::park_timeout(POLL);
        if done.load(Ordering::Relaxed) {
            return;
        }
        let Some(line) = newest_line(&mut log, &mut offset) else {
            continue;
        };
        if line != shown {
            observer(Event::StageOutput {
                stage: &stage.name,
                line: &stage.masked_output(&line),
            });
            shown = line;
        }
    }
}

/// The newest complete, non-empty line appended since `offset`, which it
/// moves past what it read.
fn newest_line(log: &mut File, offset: &mut u64) -> Option<String> {
    let length = log.metadata().ok()?.len();
    if length < *offset {
        // Truncated by the command itself: start over.
        *offset = 0;
    }
    let start = (*offset).max(length.saturating_sub(MAX_READ));
    log.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    log.by_ref()
        .take(length - start)
        .read_to_end(&mut bytes)
        .ok()?;
    // Only what ends with a newline is a line; the rest waits for its end.
    let complete = bytes.iter().rposition(|&b| b == b'\n')? + 1;
    *offset = start + complete as u64;
    let text = String::from_utf8_lossy(&bytes[..complete]);
    let line = text
        .lines()
        // A progress bar that redraws with `\r` shows its newest state.
        .map(|line| {
            line.rsplit('\r')
                .find(|part| !part.trim().is_empty())
                .unwrap_or("")
        })
        .rev()
        .find(|line| !line.trim().is_empty())?;
    Some(line.trim_end().chars().take(MAX_LINE).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn the_newest_complete_line_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stage.log");
        let mut writer = File::create(&path).unwrap();
        let mut log = File::open(&path).unwrap();
        let mut offset = 0;
        assert_eq!(newest_line(&mut log, &mut offset), None);
        writer.write_all(b"first\nsecond\npart").unwrap();
        assert_eq!(
            newest_line(&mut log, &mut offset).as_deref(),
            Some("second")
        );
        assert_eq!(newest_line(&mut log, &mut offset), None);
        writer.write_all(b"ial\n\n").unwrap();
        assert_eq!(
            newest_line(&mut log, &mut offset).as_deref(),
            Some("partial")
        );
        writer.write_all(b"10%\r50%\r100%\n").unwrap();
        assert_eq!(newest_line(&mut log, &mut offset).as_deref(), Some("100%"));
    }
}
