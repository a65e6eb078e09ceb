//! The files a job writes on the shared filesystem, read from the head.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A reader of a file that another machine is still writing: at its end
/// it waits for more until the job is over, then reads what is left.
pub(super) struct TailReader<'a> {
    pub(super) path: &'a Path,
    pub(super) file: Option<std::fs::File>,
    pub(super) offset: u64,
    pub(super) finished: &'a AtomicBool,
}

impl Read for TailReader<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        use std::io::{Seek, SeekFrom};
        loop {
            let last_look = self.finished.load(Ordering::SeqCst);
            if self.file.is_none() {
                if let Ok(file) = std::fs::File::open(self.path) {
                    self.file = Some(file);
                }
            }
            if let Some(file) = self.file.as_mut() {
                // Reopening is what makes a network filesystem show new data.
                file.seek(SeekFrom::Start(self.offset))?;
                let read = file.read(buffer)?;
                if read > 0 {
                    self.offset += read as u64;
                    return Ok(read);
                }
                self.file = None;
            }
            if last_look {
                return Ok(0);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Appends what the node wrote to `from` to the stage's log.
pub(super) fn append_file(from: &Path, log: &Path) {
    let Ok(bytes) = std::fs::read(from) else {
        return;
    };
    if bytes.is_empty() {
        return;
    }
    if let Ok(mut file) = std::fs::OpenOptions::new().append(true).open(log) {
        let _ = file.write_all(&bytes);
    }
}
