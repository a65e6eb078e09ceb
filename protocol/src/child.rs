//! A short-lived child's whole output, within a time limit.
//!
//! For the programs pipe asks something and waits on (a worker's
//! `describe`, `squeue`, `sinfo`): one that never answers must not hang
//! pipe, one that writes much on stderr must not block on it while stdout
//! is read, and bytes that are not UTF-8 must not lose the rest.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// The most of each stream kept. A child that writes more blocks on its
/// pipe and is killed at the time limit.
pub const MAX_OUTPUT_BYTES: u64 = 64 << 20;

#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Finished {
    /// The last line of stderr that says something, for an error message.
    pub fn last_stderr_line(&self) -> String {
        String::from_utf8_lossy(&self.stderr)
            .lines()
            .rev()
            .map(str::trim)
            .find(|line| !line.is_empty())
            .unwrap_or("no message")
            .to_string()
    }
}

#[derive(Debug)]
pub enum ChildError {
    Spawn(std::io::Error),
    TimedOut(Duration),
    Wait(std::io::Error),
}

impl std::fmt::Display for ChildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChildError::Spawn(error) => write!(f, "cannot start it: {error}"),
            ChildError::TimedOut(limit) => {
                write!(
                    f,
                    "it did not finish within {}",
                    crate::format::format_seconds(limit.as_secs_f64())
                )
            }
            ChildError::Wait(error) => write!(f, "waiting for it failed: {error}"),
        }
    }
}

impl std::error::Error for ChildError {}

/// Runs `command` with stdin closed and waits for it to exit, killing it
/// after `limit`; both streams are read as it writes them.
pub fn output_within(command: &mut Command, limit: Duration) -> Result<Finished, ChildError> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(ChildError::Spawn)?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ChildError::TimedOut(limit));
            }
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ChildError::Wait(error));
            }
        }
    };
    // What the child wrote is in the pipes; a process it left behind may
    // hold them open, so the rest is waited for only until the limit (and
    // a second at least).
    let rest = |receiver: Receiver<Vec<u8>>| {
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1));
        receiver.recv_timeout(wait).unwrap_or_default()
    };
    Ok(Finished {
        status,
        stdout: rest(stdout),
        stderr: rest(stderr),
    })
}

/// Reads `stream` to its end, up to [`MAX_OUTPUT_BYTES`], on a thread of
/// its own; what it read arrives on the receiver.
fn drain(stream: Option<impl Read + Send + 'static>) -> Receiver<Vec<u8>> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(stream) = stream {
            let _ = stream.take(MAX_OUTPUT_BYTES).read_to_end(&mut bytes);
        }
        let _ = sender.send(bytes);
    });
    receiver
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        command
    }

    #[test]
    fn both_streams_are_read_whatever_their_size_and_bytes() {
        // 1 MB on stderr before stdout: past a pipe's buffer.
        let finished = output_within(
            &mut sh("head -c 1000000 /dev/zero >&2; printf 'caf\\351\\nok\\n'; exit 3"),
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(finished.status.code(), Some(3));
        assert_eq!(finished.stderr.len(), 1_000_000);
        assert_eq!(
            String::from_utf8_lossy(&finished.stdout),
            "caf\u{fffd}\nok\n"
        );
    }

    #[test]
    fn a_child_that_does_not_finish_is_killed_at_the_limit() {
        let started = Instant::now();
        let error = output_within(&mut sh("sleep 30"), Duration::from_millis(200)).unwrap_err();
        assert!(matches!(error, ChildError::TimedOut(_)), "{error}");
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn the_last_line_of_stderr_is_the_message() {
        let finished = output_within(
            &mut sh("echo first >&2; echo 'the reason' >&2; echo >&2; exit 1"),
            Duration::from_secs(60),
        )
        .unwrap();
        assert_eq!(finished.last_stderr_line(), "the reason");
    }
}
