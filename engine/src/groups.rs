//! The process groups of running stages, and stopping what is left of them.
//!
//! Every stage runs in a process group of its own. Its first process writes
//! a record of the group (`.pipe/groups/PIPEPID-STAGE`: the group id and the
//! start time of its leader) before it runs anything, and pipe removes the
//! record once no process of the group is left. A `pipe` that is killed
//! cannot remove its records; the next holder of the run lock reads them and
//! kills those groups, and waits until they are empty, before it touches
//! any output. So a process of a dead run never writes into a later one.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{EngineError, Result};
use pipe_cache::untrusted;

/// Under the project's `.pipe/`.
const RECORDS_DIR: &str = "groups";

/// After SIGKILL a process is normally gone within milliseconds; one that
/// is not after this long is stuck in the kernel (a dead NFS server) and
/// waiting on longer would only hang pipe.
const KILL_WAIT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(5);

/// Where one stage's group is recorded; prepared by pipe before the spawn,
/// written by the child before exec.
#[derive(Debug, Clone)]
pub struct GroupRecord {
    path: PathBuf,
    c_path: CString,
}

impl GroupRecord {
    /// The record of stage number `stage_index` of this `pipe` process.
    pub fn for_stage(state_dir: &Path, stage_index: usize) -> GroupRecord {
        let path = state_dir
            .join(RECORDS_DIR)
            .join(format!("{}-{stage_index}", std::process::id()));
        // A path from `.pipe/` and two numbers; a NUL byte cannot occur in
        // it, but if it ever did the record would simply fail to be written.
        let c_path = CString::new(path.as_os_str().as_bytes()).unwrap_or_default();
        GroupRecord { path, c_path }
    }

    /// Makes sure the record can be written: a failure in the child could
    /// only say `cannot start bash`.
    pub fn prepare(&self) -> std::io::Result<()> {
        match self.path.parent() {
            Some(dir) => std::fs::create_dir_all(dir),
            None => Ok(()),
        }
    }

    /// Writes `PGID STARTTIME` for the calling process, which leads its own
    /// group. Runs in a forked child between fork and exec, where only
    /// async-signal-safe calls are allowed: no allocation, no locks.
    pub fn write_from_child(&self) -> std::io::Result<()> {
        let mut text = [0u8; 48];
        // SAFETY: getpid cannot fail.
        let pid = unsafe { libc::getpid() } as u64;
        let mut length = push_decimal(&mut text, 0, pid);
        text[length] = b' ';
        length = push_decimal(&mut text, length + 1, own_start_time().unwrap_or(0));
        text[length] = b'\n';
        length += 1;
        // SAFETY: open, write and close are async-signal-safe; the path is
        // a valid C string owned by `self`, the buffer lives on this stack.
        unsafe {
            let fd = libc::open(
                self.c_path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
                0o644,
            );
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let written = libc::write(fd, text.as_ptr().cast(), length);
            libc::close(fd);
            if written != length as isize {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Once nothing of the group is left.
    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Appends `value` in decimal at `at`; returns the new length.
fn push_decimal(buffer: &mut [u8], at: usize, mut value: u64) -> usize {
    let mut digits = [0u8; 20];
    let mut count = 0;
    loop {
        digits[count] = b'0' + (value % 10) as u8;
        count += 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for (offset, digit) in digits[..count].iter().rev().enumerate() {
        buffer[at + offset] = *digit;
    }
    at + count
}

/// The calling process's start time (clock ticks after boot), read with
/// raw system calls so that it can run between fork and exec.
fn own_start_time() -> Option<u64> {
    let mut buffer = [0u8; 1024];
    // SAFETY: as in `write_from_child`; the path is a static C string.
    let length = unsafe {
        let fd = libc::open(
            c"/proc/self/stat".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return None;
        }
        let length = libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len());
        libc::close(fd);
        length
    };
    let length = usize::try_from(length).ok()?;
    parse_stat(&buffer[..length]).map(|stat| stat.start_time)
}

/// The fields of `/proc/PID/stat` that tell a process's group and state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcStat {
    state: u8,
    group: i32,
    start_time: u64,
}

/// Parses without allocating (it also runs between fork and exec). The
/// command name in parentheses may itself hold spaces and parentheses, so
/// fields are counted from the last `)`.
fn parse_stat(text: &[u8]) -> Option<ProcStat> {
    let close = text.iter().rposition(|&byte| byte == b')')?;
    // After the name: state (field 3), ppid, pgrp (5), …, starttime (22).
    let mut fields = text[close + 1..]
        .split(|&byte| byte == b' ')
        .filter(|field| !field.is_empty());
    let state = *fields.next()?.first()?;
    let group = parse_number(fields.nth(1)?)?;
    let start_time = parse_number(fields.nth(16)?)?;
    Some(ProcStat {
        state,
        group: i32::try_from(group).ok()?,
        start_time,
    })
}

fn parse_number(field: &[u8]) -> Option<u64> {
    if field.is_empty() || field.len() > 19 {
        return None;
    }
    field.iter().try_fold(0u64, |value, &byte| {
        byte.is_ascii_digit()
            .then(|| value * 10 + u64::from(byte - b'0'))
    })
}

/// Whether `pid` runs (not a zombie) and, when `start_time` is known, is
/// the process that started then rather than a later owner of the number.
pub(crate) fn is_running_process(pid: u32, start_time: Option<u64>) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    match stat_of(pid) {
        Some(stat) => stat.state != b'Z' && start_time.is_none_or(|at| at == stat.start_time),
        None => false,
    }
}

/// This process's start time (clock ticks after boot).
pub(crate) fn start_time_of_self() -> Option<u64> {
    own_start_time()
}

fn stat_of(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// The processes of group `group` that still run. A zombie has exited (it
/// can write nothing) but still counts for `kill(-group, 0)` until its
/// parent reaps it, which in a container whose PID 1 does not reap is
/// never; so zombies are left out by reading each process's state.
pub fn live_members(group: i32) -> Vec<i32> {
    // SAFETY: signal 0 only asks whether the group has any process.
    if unsafe { libc::kill(-group, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        // No /proc to tell zombies apart: trust kill(2).
        return vec![group];
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            stat_of(pid)
                .is_some_and(|stat| stat.group == group && !matches!(stat.state, b'Z' | b'X'))
        })
        .collect()
}

/// Signals the group with `first` (SIGTERM gives its processes `grace` to
/// clean up; then SIGKILL) and waits until none of its processes runs.
/// Returns the processes that were running when called, or, as the error,
/// those that survived SIGKILL.
pub fn stop(
    group: i32,
    first: libc::c_int,
    grace: Duration,
) -> std::result::Result<Vec<i32>, Vec<i32>> {
    let found = live_members(group);
    if found.is_empty() {
        return Ok(found);
    }
    let signal_group = |signal| {
        // SAFETY: kill(2) on a group this module is asked to stop.
        unsafe { libc::kill(-group, signal) };
    };
    signal_group(first);
    let mut killed_at = (first == libc::SIGKILL).then(Instant::now);
    let started = Instant::now();
    loop {
        std::thread::sleep(POLL);
        let members = live_members(group);
        if members.is_empty() {
            return Ok(found);
        }
        match killed_at {
            None if started.elapsed() >= grace => {
                signal_group(libc::SIGKILL);
                killed_at = Some(Instant::now());
            }
            Some(at) if at.elapsed() >= KILL_WAIT => return Err(members),
            _ => {}
        }
    }
}

/// Kills the groups recorded by `pipe` processes that are gone, waits until
/// they are empty, and removes their records; makes the records directory.
/// Call holding the run lock, so that every record belongs to a dead run.
/// Returns how many processes were stopped.
pub fn stop_left_behind(state_dir: &Path) -> Result<usize> {
    let dir = state_dir.join(RECORDS_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&dir).map_err(|e| EngineError::io(&dir, e))?;
            return Ok(0);
        }
        Err(error) => return Err(EngineError::io(&dir, error)),
    };
    let mut stopped = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        // A record that is a link, a FIFO or too large is damaged, as is
        // one cut short: removed below.
        let bytes = untrusted::read(&path, untrusted::STATE_FILE).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let mut numbers = text.split_whitespace().map(str::parse::<u64>);
        let (Some(Ok(group)), Some(Ok(start_time))) = (numbers.next(), numbers.next()) else {
            // Cut short by a kill while it was being written: the process
            // that wrote it died before it could run anything.
            let _ = std::fs::remove_file(&path);
            continue;
        };
        let Ok(group) = i32::try_from(group) else {
            let _ = std::fs::remove_file(&path);
            continue;
        };
        if still_ours(group, start_time) {
            match stop(group, libc::SIGKILL, Duration::ZERO) {
                Ok(found) => stopped += found.len(),
                Err(survivors) => {
                    let problem = std::io::Error::other(format!(
                        "processes {survivors:?}, left running by a killed `pipe run`, survive SIGKILL \
                         (stuck in the kernel, e.g. on a hung network file system); \
                         run again when they are gone"
                    ));
                    return Err(EngineError::io(&path, problem));
                }
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    Ok(stopped)
}

/// Whether group `group`, recorded with a leader started at `start_time`,
/// may still hold processes of that stage rather than of some later owner
/// of the number. While a group has a member its id is not given to a new
/// process; so a live process with that id but another start time means the
/// recorded group is long gone.
fn still_ours(group: i32, start_time: u64) -> bool {
    match stat_of(group) {
        Some(leader) => leader.start_time == start_time,
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::{CommandExt, ExitStatusExt};

    use super::*;

    #[test]
    fn parses_stat_with_spaces_and_parentheses_in_the_name() {
        let text = b"4242 (a (b) c) S 1 4240 4240 0 -1 4194304 91 0 0 0 0 0 0 0 20 0 1 0 987654 8192 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(
            parse_stat(text),
            Some(ProcStat {
                state: b'S',
                group: 4240,
                start_time: 987654
            })
        );
        assert_eq!(parse_stat(b"12 (x) Z"), None);
    }

    #[test]
    fn own_start_time_matches_proc() {
        let ours = stat_of(std::process::id() as i32).expect("/proc/self");
        assert_eq!(own_start_time(), Some(ours.start_time));
    }

    #[test]
    fn push_decimal_writes_digits() {
        let mut buffer = [0u8; 30];
        let length = push_decimal(&mut buffer, 0, 0);
        let length = push_decimal(&mut buffer, length, u64::MAX);
        assert_eq!(&buffer[..length], b"018446744073709551615");
    }

    #[test]
    fn records_of_dead_runs_are_removed_and_their_groups_stopped() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(stop_left_behind(dir.path()).unwrap(), 0);
        let records = dir.path().join(RECORDS_DIR);
        assert!(records.is_dir());

        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .unwrap();
        let group = child.id() as i32;
        let start = stat_of(group).unwrap().start_time;
        std::fs::write(records.join("1-0"), format!("{group} {start}\n")).unwrap();
        // A record whose leader number now belongs to another process.
        std::fs::write(records.join("1-1"), format!("{} 1\n", std::process::id())).unwrap();
        std::fs::write(records.join("1-2"), "12").unwrap();

        assert_eq!(stop_left_behind(dir.path()).unwrap(), 1);
        assert!(child.wait().unwrap().signal() == Some(libc::SIGKILL));
        assert_eq!(std::fs::read_dir(&records).unwrap().count(), 0);
    }
}
