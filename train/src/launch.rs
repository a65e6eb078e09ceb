//! Starts the N rank processes of a data-parallel run on this machine, as
//! torchrun and Lightning's `ddp` do, and stands in for them towards the
//! engine: one worker process in, one stream of events out.
//!
//! - The launcher hosts the TCPStore the ranks meet at, on a port the
//!   kernel chose, so no two runs race for a port.
//! - Every rank is this same executable, run on the same invocation with
//!   its share of the threads and `PIPE_RANK`, `PIPE_WORLD_SIZE`,
//!   `PIPE_MASTER_ADDR` and `PIPE_MASTER_PORT` set (`crate::distributed`).
//! - Rank 0 writes the outputs; only its progress reaches the engine, and
//!   every rank's messages and stderr reach the stage log with `[rankN]`
//!   in front, as torchrun's `--tee` prefixes them.
//! - The ranks stay in the launcher's process group, which the engine stops
//!   on Ctrl-C and after the stage; each dies with the launcher
//!   (PR_SET_PDEATHSIG), which dies with pipe, so `kill -9` of pipe leaves
//!   no rank behind. When a rank fails, the launcher gives the others a
//!   moment to notice (c10d fails their next collective) and then kills
//!   them, and names the rank that failed first with its last line; a rank
//!   that stops answering is named when the others time out waiting for it.

use std::io::{BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pipe_protocol::lines::TextLines;
use pipe_protocol::Event;
use pipe_stages::{StageContext, StageError};

use crate::c10d::StoreServer;
use crate::distributed::{
    LOCAL_RANK_ENV, MASTER_ADDR_ENV, MASTER_PORT_ENV, RANK_ENV, WORLD_SIZE_ENV,
};

/// How long the other ranks get to stop by themselves after one failed,
/// before they are killed.
const GRACE: Duration = Duration::from_secs(5);

enum Line {
    Event(Event),
    Stdout(String),
    Stderr(String),
    Closed,
}

#[derive(Default)]
struct RankState {
    status: Option<ExitStatus>,
    done: bool,
    error: Option<(String, Option<String>)>,
    last_line: Option<String>,
    open_streams: usize,
    killed: bool,
    /// When the launcher first saw this rank fail.
    failed_at: Option<Instant>,
}

impl RankState {
    fn failed(&self) -> bool {
        self.error.is_some()
            || self
                .status
                .is_some_and(|status| !status.success() || !self.done)
    }

    /// A failure of this rank's own, not a collective that broke because a
    /// peer went away, and not the launcher's kill of a rank that hung.
    fn failed_on_its_own(&self) -> bool {
        match &self.error {
            Some((_, hint)) => hint.as_deref() != Some(PEER_FAILURE_HINT),
            None => !self.killed,
        }
    }
}

/// The hint of a rank's collective error: the broken connection is usually
/// a peer's death, which the launcher then names instead.
pub const PEER_FAILURE_HINT: &str = "another rank probably failed first: its error is the run's";

/// Runs the stage on `world` local ranks and returns when all have ended:
/// Ok when every rank finished, else the first failure, named.
pub fn run_ranks(
    context: &StageContext,
    world: usize,
    timeout: Duration,
) -> Result<(), StageError> {
    let store = StoreServer::start(timeout).map_err(|error| {
        StageError::Other(format!("cannot start the ranks' rendezvous store: {error}"))
    })?;
    let program = std::env::current_exe().map_err(|error| {
        StageError::Other(format!("cannot find this worker's executable: {error}"))
    })?;
    let threads = (context.threads() / world).max(1);
    context.message(format!(
        "starting {world} rank processes ({threads} thread{} each), rendezvous at 127.0.0.1:{}",
        if threads == 1 { "" } else { "s" },
        store.port()
    ));
    let (sender, receiver) = mpsc::channel::<(usize, Line)>();
    let mut children: Vec<Child> = Vec::with_capacity(world);
    let mut states: Vec<RankState> = (0..world).map(|_| RankState::default()).collect();
    for rank in 0..world {
        let file = rank_invocation(context, rank, threads)?;
        let mut command = Command::new(&program);
        command
            .arg("run")
            .arg("--invocation")
            .arg(&file)
            .env(RANK_ENV, rank.to_string())
            .env(LOCAL_RANK_ENV, rank.to_string())
            .env(WORLD_SIZE_ENV, world.to_string())
            .env(MASTER_ADDR_ENV, "127.0.0.1")
            .env(MASTER_PORT_ENV, store.port().to_string())
            // Each rank its share of the cores, as torchrun sets it.
            .env("OMP_NUM_THREADS", threads.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let launcher = std::process::id();
        // SAFETY: between fork and exec, only prctl and getppid, which are
        // async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() as u32 != launcher {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                kill_all(&mut children, &mut states);
                return Err(StageError::Other(format!(
                    "cannot start rank {rank} (`{}`): {error}",
                    program.display()
                )));
            }
        };
        if let Some(stdout) = child.stdout.take() {
            relay(rank, stdout, sender.clone(), true);
            states[rank].open_streams += 1;
        }
        if let Some(stderr) = child.stderr.take() {
            relay(rank, stderr, sender.clone(), false);
            states[rank].open_streams += 1;
        }
        children.push(child);
    }
    drop(sender);

    let mut first_failure: Option<Instant> = None;
    loop {
        match receiver.recv_timeout(Duration::from_millis(100)) {
            Ok((rank, line)) => handle(context, rank, line, &mut states[rank]),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {}
        }
        for (rank, child) in children.iter_mut().enumerate() {
            if states[rank].status.is_none() {
                if let Ok(Some(status)) = child.try_wait() {
                    states[rank].status = Some(status);
                }
            }
        }
        for state in states.iter_mut() {
            if state.failed_at.is_none() && state.failed() {
                state.failed_at = Some(Instant::now());
                first_failure.get_or_insert(Instant::now());
            }
        }
        if first_failure.is_some_and(|since| since.elapsed() >= GRACE) {
            kill_all(&mut children, &mut states);
        }
        let all_ended = states
            .iter()
            .all(|state| state.status.is_some() && state.open_streams == 0);
        if all_ended {
            break;
        }
    }
    // Lines still queued after the last check.
    while let Ok((rank, line)) = receiver.try_recv() {
        handle(context, rank, line, &mut states[rank]);
    }
    match cause(&states) {
        None => Ok(()),
        Some(rank) => Err(failure(&states, rank, world, timeout)),
    }
}

/// The rank whose failure caused the others'. A rank killed by a signal is
/// seen only at the next poll, after its peers may already have reported
/// the broken connection, so the order seen is not the order of causes: a
/// failure of a rank's own comes before one that blames a peer, and the
/// earliest seen decides among equals.
fn cause(states: &[RankState]) -> Option<usize> {
    let failed = || (0..states.len()).filter(|&rank| states[rank].failed_at.is_some());
    let earliest =
        |ranks: &mut dyn Iterator<Item = usize>| ranks.min_by_key(|&rank| states[rank].failed_at);
    earliest(&mut failed().filter(|&rank| states[rank].failed_on_its_own()))
        .or_else(|| earliest(&mut failed()))
}

fn rank_invocation(
    context: &StageContext,
    rank: usize,
    threads: usize,
) -> Result<PathBuf, StageError> {
    let mut invocation = context.invocation.clone();
    invocation.threads = threads;
    let file = context
        .scratch_dir()
        .join(format!("rank-{rank}.invocation.json"));
    let text =
        serde_json::to_string(&invocation).map_err(|error| StageError::Other(error.to_string()))?;
    std::fs::create_dir_all(context.scratch_dir())
        .map_err(|error| StageError::io(context.scratch_dir(), error))?;
    std::fs::write(&file, text).map_err(|error| StageError::io(&file, error))?;
    Ok(file)
}

fn relay(
    rank: usize,
    stream: impl Read + Send + 'static,
    sender: mpsc::Sender<(usize, Line)>,
    events: bool,
) {
    std::thread::spawn(move || {
        // To the end of the stream whatever a rank writes (a library's
        // Latin-1, a stray binary write): stopping early would leave the
        // rank blocked on a full pipe.
        for line in TextLines::new(BufReader::new(stream)) {
            let line = if !events {
                Line::Stderr(line)
            } else {
                match serde_json::from_str::<Event>(&line) {
                    Ok(event) => Line::Event(event),
                    Err(_) => Line::Stdout(line),
                }
            };
            if sender.send((rank, line)).is_err() {
                return;
            }
        }
        let _ = sender.send((rank, Line::Closed));
    });
}

fn handle(context: &StageContext, rank: usize, line: Line, state: &mut RankState) {
    match line {
        Line::Event(Event::Progress { .. }) if rank != 0 => {}
        Line::Event(event @ Event::Progress { .. }) => pipe_stages::emit(&event),
        Line::Event(Event::Message { text }) => {
            context.message(format!("[rank{rank}] {text}"));
            state.last_line = Some(text);
        }
        Line::Event(Event::Done) => state.done = true,
        Line::Event(Event::Error { message, hint }) => {
            state.last_line = Some(message.clone());
            state.error = Some((message, hint));
        }
        Line::Stdout(text) | Line::Stderr(text) => {
            eprintln!("[rank{rank}] {text}");
            if !text.trim().is_empty() {
                state.last_line = Some(text);
            }
        }
        Line::Closed => state.open_streams = state.open_streams.saturating_sub(1),
    }
}

fn kill_all(children: &mut [Child], states: &mut [RankState]) {
    for (child, state) in children.iter_mut().zip(states.iter_mut()) {
        if state.status.is_none() && !state.killed {
            let _ = child.kill();
            state.killed = true;
        }
    }
}

fn describe_exit(state: &RankState) -> String {
    match (&state.error, state.status) {
        (Some((message, _)), _) => message.clone(),
        (None, Some(status)) => match status.signal() {
            Some(signal) => format!("it was killed by signal {signal}{}", signal_name(signal)),
            None if status.success() => "it exited without finishing".to_string(),
            None => format!("it exited with status {}", status.code().unwrap_or(-1)),
        },
        (None, None) => "it did not finish".to_string(),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGKILL => " (SIGKILL)",
        libc::SIGTERM => " (SIGTERM)",
        libc::SIGSEGV => " (SIGSEGV)",
        libc::SIGABRT => " (SIGABRT)",
        libc::SIGINT => " (SIGINT)",
        _ => "",
    }
}

fn last_line(state: &RankState) -> String {
    match &state.last_line {
        Some(line) => format!("; its last line: {}", pipe_protocol::excerpt(line)),
        None => "; it printed nothing".to_string(),
    }
}

/// The error of a run whose rank `first` failed first. When that failure
/// is a timeout and some ranks never failed on their own (the launcher had
/// to kill them), those are the ones that stopped answering.
fn failure(states: &[RankState], first: usize, world: usize, timeout: Duration) -> StageError {
    let timed_out = states[first].error.as_ref().is_some_and(|(message, _)| {
        message.to_ascii_lowercase().contains("timed out")
            || message.to_ascii_lowercase().contains("timeout")
    });
    let silent: Vec<usize> = (0..world)
        .filter(|&rank| states[rank].killed && states[rank].error.is_none())
        .collect();
    if timed_out && !silent.is_empty() {
        let named = silent
            .iter()
            .map(|rank| format!("rank {rank}{}", last_line(&states[*rank])))
            .collect::<Vec<_>>()
            .join("; ");
        return StageError::input(
            format!(
                "{named}: stopped answering; rank {first} of {world} timed out after {} s waiting for it",
                timeout.as_secs()
            ),
            "look at that rank's lines in the stage log; `collective_timeout` sets how long ranks wait for each other",
        );
    }
    let state = &states[first];
    let hint = state
        .error
        .as_ref()
        .and_then(|(_, hint)| hint.clone())
        .filter(|hint| !hint.is_empty())
        .unwrap_or_else(|| "every rank's lines are in the stage log, prefixed with [rankN]; the other ranks were stopped".to_string());
    let why = describe_exit(state);
    let last = if state.error.is_some() {
        String::new()
    } else {
        last_line(state)
    };
    StageError::input(format!("rank {first} of {world} failed: {why}{last}"), hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(at: Instant, error: Option<&str>, hint: Option<&str>, killed: bool) -> RankState {
        RankState {
            error: error.map(|message| (message.to_string(), hint.map(str::to_string))),
            killed,
            failed_at: Some(at),
            ..RankState::default()
        }
    }

    #[test]
    fn a_rank_killed_by_a_signal_is_the_cause_even_when_its_peer_reported_first() {
        let now = Instant::now();
        let peer = failed(
            now,
            Some("Connection reset by peer"),
            Some(PEER_FAILURE_HINT),
            false,
        );
        let crashed = failed(now + Duration::from_millis(80), None, None, false);
        assert_eq!(cause(&[peer, crashed]), Some(1));
    }

    #[test]
    fn a_ranks_own_error_comes_before_the_broken_connections_it_caused() {
        let now = Instant::now();
        let peer = failed(
            now,
            Some("Connection closed"),
            Some(PEER_FAILURE_HINT),
            false,
        );
        let own = failed(
            now + Duration::from_millis(5),
            Some("out of memory"),
            Some("smaller batch"),
            false,
        );
        assert_eq!(cause(&[peer, own]), Some(1));
    }

    #[test]
    fn when_only_peers_are_blamed_the_earliest_decides_and_a_killed_hang_is_no_cause() {
        let now = Instant::now();
        let hung = failed(now + Duration::from_secs(5), None, None, true);
        let timed_out = failed(now, Some("timed out"), Some(PEER_FAILURE_HINT), false);
        assert_eq!(cause(&[hung, timed_out]), Some(1));
        assert_eq!(cause(&[RankState::default(), RankState::default()]), None);
    }
}
