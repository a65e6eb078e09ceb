//! The tools of a worker build (the libtorch bootstrap's pip, then cargo)
//! run with their output in a log file, and what the user sees is each
//! step's progress through the run's observer. On a fresh clone cargo
//! prints some 400 `Compiling` lines that say nothing a count does not,
//! bury the line that says what pipe is doing, and ignore `--quiet`; the
//! log keeps every line, and a failure shows its last ones.

use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::events::{BuildStep, Event, Observer};
use crate::{interrupt, EngineError, Result};

/// How many of the log's last lines a failure shows: enough for rustc's
/// error with its context, or pip's traceback and its last message.
const TAIL_LINES: usize = 30;

/// How often a step's progress is sent when nothing it counts changed, so
/// that the time it has taken moves on screen (a reporter has no clock).
const TICK: Duration = Duration::from_secs(1);

/// After the tool exits, how long its output may still take to arrive: a
/// process it left behind (a compiler cache's server) can hold the pipes
/// open for good.
const DRAIN: Duration = Duration::from_secs(2);

/// The log of one worker build: every step's command and output, in order,
/// truncated when the next build starts.
pub(super) struct BuildLog {
    path: PathBuf,
    file: File,
    tail: VecDeque<String>,
}

impl BuildLog {
    pub(super) fn create(path: &Path) -> Result<BuildLog> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, e))?;
        }
        let file = File::create(path).map_err(|e| EngineError::io(path, e))?;
        Ok(BuildLog {
            path: path.to_path_buf(),
            file,
            tail: VecDeque::with_capacity(TAIL_LINES),
        })
    }

    fn line(&mut self, line: &str) {
        // A log that cannot be written loses lines, not the build.
        let _ = writeln!(self.file, "{line}");
        if self.tail.len() == TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(line.to_string());
    }

    /// The last lines written, where a failure's cause usually is.
    pub(super) fn tail(&self) -> String {
        let lines: Vec<&str> = self.tail.iter().map(String::as_str).collect();
        lines.join("\n")
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

/// What a step reads from its tool's output to show its progress.
pub(super) enum Watch {
    /// cargo with `--message-format=json-render-diagnostics`: a JSON
    /// message a line on stdout (`compiler-artifact` for each unit built
    /// or found up to date), its own text, errors rendered, on stderr.
    Cargo {
        total: Option<u64>,
        /// The total, while `cargo metadata` works it out.
        pending: Option<Receiver<Option<u64>>>,
        crates: HashSet<String>,
    },
    /// pip, under `scripts/bootstrap-libtorch.sh`, with TMPDIR set to
    /// `tmp`: what it downloads grows there, and its lines say which file.
    Pip {
        tmp: PathBuf,
        detail: Option<String>,
    },
}

impl Watch {
    #[cfg(test)]
    fn cargo(total: Option<u64>) -> Watch {
        Watch::Cargo {
            total,
            pending: None,
            crates: HashSet::new(),
        }
    }

    /// cargo building `packages`, its total asked of `cargo metadata` on a
    /// thread: on a fresh clone that waits for crates to download, and
    /// the step's time is shown meanwhile (`run_step`).
    pub(super) fn cargo_counting(cargo: impl Fn() -> Command, packages: &[&str]) -> Watch {
        let (version, metadata) = (cargo(), cargo());
        let packages: Vec<String> = packages.iter().map(|name| name.to_string()).collect();
        let (sender, pending) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(crates_to_build(version, metadata, &packages));
        });
        Watch::Cargo {
            total: None,
            pending: Some(pending),
            crates: HashSet::new(),
        }
    }

    /// Waits for the total `cargo metadata` is working out, if any,
    /// reporting every `TICK` meanwhile. Before the build starts, not
    /// beside it: both take cargo's package cache lock, so the build
    /// would wait as long, and a count that comes late would leave the
    /// first lines without their total.
    fn wait_for_total(&mut self, report: impl Fn(&Watch)) {
        let Watch::Cargo { pending, .. } = self else {
            return;
        };
        let Some(receiver) = pending.take() else {
            return;
        };
        loop {
            match receiver.recv_timeout(TICK) {
                Ok(counted) => {
                    if let Watch::Cargo { total, .. } = self {
                        *total = counted;
                    }
                    return;
                }
                Err(RecvTimeoutError::Timeout) => report(self),
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Reads one line; whether what is shown changed.
    fn read(&mut self, from: Stream, line: &str, log: &mut BuildLog) -> bool {
        match self {
            Watch::Cargo { crates, .. } => {
                if from == Stream::Err {
                    log.line(line);
                    return false;
                }
                match serde_json::from_str::<CargoMessage>(line) {
                    Ok(message) if message.reason == "compiler-artifact" => {
                        message.package_id.is_some_and(|id| crates.insert(id))
                    }
                    Ok(_) => false,
                    Err(_) => {
                        log.line(line);
                        false
                    }
                }
            }
            Watch::Pip { detail, .. } => {
                log.line(line);
                match pip_detail(line) {
                    Some(new) => {
                        *detail = Some(new);
                        true
                    }
                    None => false,
                }
            }
        }
    }

    fn done(&self) -> u64 {
        match self {
            Watch::Cargo { crates, .. } => crates.len() as u64,
            Watch::Pip { tmp, .. } => downloaded(tmp),
        }
    }

    fn total(&self) -> Option<u64> {
        match self {
            Watch::Cargo { total, .. } => *total,
            Watch::Pip { .. } => None,
        }
    }

    fn detail(&self) -> Option<&str> {
        match self {
            Watch::Cargo { .. } => None,
            Watch::Pip { detail, .. } => detail.as_deref(),
        }
    }
}

#[derive(Deserialize)]
struct CargoMessage {
    reason: String,
    package_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Out,
    Err,
}

/// Who is told of a step's progress, and what stops it.
pub(super) struct Progress<'a> {
    pub(super) workers: &'a [&'a str],
    pub(super) observer: Observer<'a>,
    /// Set when the run no longer needs the build (`PendingBuild`).
    pub(super) stop: &'a AtomicBool,
}

/// Runs `command` to its end with its stdout and stderr read by `watch`
/// and written to `log`, telling the observer the step's progress.
pub(super) fn run_step(
    mut command: Command,
    step: BuildStep,
    watch: &mut Watch,
    log: &mut BuildLog,
    progress: &Progress<'_>,
) -> Result<ExitStatus> {
    let started = Instant::now();
    let report = |watch: &Watch| {
        (progress.observer)(Event::WorkerBuildProgress {
            workers: progress.workers,
            step,
            done: watch.done(),
            total: watch.total(),
            detail: watch.detail(),
            elapsed: started.elapsed(),
        })
    };
    report(watch);
    watch.wait_for_total(report);
    log.line(&format!("$ {}", shown(&command)));
    let program = command.get_program().to_os_string();
    // A process group of its own, so that a build the run no longer needs
    // can be stopped with everything it started (cargo's rustc, the
    // bootstrap's pip); Ctrl-C, which the terminal sends to pipe's group
    // only, is passed on by `follow`.
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| EngineError::io(&program, e))?;
    let (sender, lines) = mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        read_lines(stdout, Stream::Out, sender.clone());
    }
    if let Some(stderr) = child.stderr.take() {
        read_lines(stderr, Stream::Err, sender);
    }
    let status = follow(&mut child, &lines, watch, log, progress.stop, report)
        .map_err(|e| EngineError::io(&program, e))?;
    report(watch);
    Ok(status)
}

/// Reads the tool's lines until it exits and its output has arrived,
/// reporting when what is shown changed and at least every `TICK`; sends
/// its process group SIGINT, once, on Ctrl-C or when `stop` is set.
fn follow(
    child: &mut Child,
    lines: &Receiver<(Stream, String)>,
    watch: &mut Watch,
    log: &mut BuildLog,
    stop: &AtomicBool,
    report: impl Fn(&Watch),
) -> std::io::Result<ExitStatus> {
    let mut reported = Instant::now();
    let mut exited: Option<(ExitStatus, Instant)> = None;
    let mut stopped = false;
    loop {
        if !stopped && exited.is_none() && (stop.load(Ordering::SeqCst) || interrupt::requested()) {
            stopped = true;
            if let Ok(group) = libc::pid_t::try_from(child.id()) {
                // SAFETY: kill(2) with a negative pid signals that process
                // group; it touches no memory of this process.
                unsafe {
                    libc::kill(-group, libc::SIGINT);
                }
            }
        }
        let wait = TICK.saturating_sub(reported.elapsed());
        match lines.recv_timeout(wait) {
            Ok((from, line)) => {
                if watch.read(from, &line, log) {
                    report(watch);
                    reported = Instant::now();
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if reported.elapsed() >= TICK {
            report(watch);
            reported = Instant::now();
        }
        if exited.is_none() {
            exited = child.try_wait()?.map(|status| (status, Instant::now()));
        }
        if exited.is_some_and(|(_, at)| at.elapsed() >= DRAIN) {
            break;
        }
    }
    match exited {
        Some((status, _)) => Ok(status),
        None => child.wait(),
    }
}

/// A thread that sends each line of `from` (invalid UTF-8 replaced) until
/// it ends; left to itself, so that a pipe held open by a process the tool
/// left behind holds up nothing.
fn read_lines(from: impl Read + Send + 'static, stream: Stream, to: Sender<(Stream, String)>) {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(from);
        let mut buffer = Vec::new();
        loop {
            buffer.clear();
            match reader.read_until(b'\n', &mut buffer) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buffer);
                    let line = line.trim_end_matches(['\n', '\r']).to_string();
                    if to.send((stream, line)).is_err() {
                        return;
                    }
                }
            }
        }
    });
}

/// The command as the log shows it: the program and its arguments.
fn shown(command: &Command) -> String {
    let words: Vec<String> = std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|word| word.to_string_lossy().into_owned())
        .collect();
    words.join(" ")
}

/// Bytes pip has downloaded so far: it downloads each file into a
/// `pip-unpack-*` directory of TMPDIR, removed when it exits. Its HTTP
/// cache buffers a copy elsewhere in TMPDIR, which is not counted twice.
fn downloaded(tmp: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with("pip-unpack-")
        })
        .filter_map(|entry| std::fs::read_dir(entry.path()).ok())
        .flat_map(|files| files.flatten())
        .filter_map(|file| file.metadata().ok())
        .filter(|metadata| metadata.is_file())
        .map(|metadata| metadata.len())
        .sum()
}

/// What a line of pip's (or of the bootstrap script's) says it is doing,
/// short enough for a line on screen; `None` for the lines between (its
/// progress bar's last state, dependencies already there).
fn pip_detail(line: &str) -> Option<String> {
    let line = line.trim();
    if let Some(file) = line.strip_prefix("Downloading ") {
        // A file from another index is named by its whole URL.
        let (url, size) = file.split_once(' ').unwrap_or((file, ""));
        let name = url.rsplit('/').next().unwrap_or(url);
        return Some(format!("downloading {name} {size}").trim_end().to_string());
    }
    if let Some(packages) = line.strip_prefix("Installing collected packages: ") {
        return Some(match packages.split(", ").count() {
            1 => "installing 1 package into .venv/".to_string(),
            count => format!("installing {count} packages into .venv/"),
        });
    }
    let known = [
        ("creating ", "creating "),
        ("waiting for ", "waiting for "),
        ("Collecting ", "collecting "),
        ("Using cached ", "using cached "),
        ("Successfully installed ", "installed "),
        ("torch ", "torch "),
        ("using LIBTORCH=", "using LIBTORCH="),
    ];
    known.iter().find_map(|(prefix, shown)| {
        line.strip_prefix(prefix).map(|rest| {
            let text = format!("{shown}{rest}");
            match text.char_indices().nth(120) {
                Some((at, _)) => format!("{}…", &text[..at]),
                None => text,
            }
        })
    })
}

/// How many crates building `packages` involves, from `cargo metadata`:
/// every package their normal and build dependencies reach on this host.
/// An estimate: the resolve there is the whole workspace's, so an
/// optional dependency another member enables counts too. `None` when
/// cargo cannot say (offline and missing a crate, a `CARGO` that is no
/// cargo). `version` and `metadata` are cargo, to be given the arguments.
fn crates_to_build(
    mut version: Command,
    mut metadata: Command,
    packages: &[String],
) -> Option<u64> {
    let host = {
        let output = version.arg("-vV").stderr(Stdio::null()).output().ok()?;
        let text = String::from_utf8(output.stdout).ok()?;
        let host = text.lines().find_map(|line| line.strip_prefix("host: "))?;
        host.trim().to_string()
    };
    let output = metadata
        .args(["metadata", "--format-version", "1", "--filter-platform"])
        .arg(&host)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let metadata: Metadata = serde_json::from_slice(&output.stdout).ok()?;
    let packages: Vec<&str> = packages.iter().map(String::as_str).collect();
    Some(metadata.reachable_from(&packages) as u64).filter(|count| *count > 0)
}

#[derive(Deserialize)]
struct Metadata {
    packages: Vec<Package>,
    workspace_members: Vec<String>,
    resolve: Resolve,
}

#[derive(Deserialize)]
struct Package {
    id: String,
    name: String,
}

#[derive(Deserialize)]
struct Resolve {
    nodes: Vec<Node>,
}

#[derive(Deserialize)]
struct Node {
    id: String,
    deps: Vec<NodeDep>,
}

#[derive(Deserialize)]
struct NodeDep {
    pkg: String,
    dep_kinds: Vec<DepKind>,
}

#[derive(Deserialize)]
struct DepKind {
    /// `null` for a normal dependency, else `build` or `dev`.
    kind: Option<String>,
}

impl Metadata {
    fn reachable_from(&self, packages: &[&str]) -> usize {
        let mut todo: Vec<&str> = self
            .packages
            .iter()
            .filter(|package| {
                packages.contains(&package.name.as_str())
                    && self.workspace_members.contains(&package.id)
            })
            .map(|package| package.id.as_str())
            .collect();
        let mut seen: HashSet<&str> = HashSet::new();
        while let Some(id) = todo.pop() {
            if !seen.insert(id) {
                continue;
            }
            let Some(node) = self.resolve.nodes.iter().find(|node| node.id == id) else {
                continue;
            };
            todo.extend(
                node.deps
                    .iter()
                    .filter(|dep| {
                        dep.dep_kinds
                            .iter()
                            .any(|kind| kind.kind.as_deref() != Some("dev"))
                    })
                    .map(|dep| dep.pkg.as_str()),
            );
        }
        seen.len()
    }
}

#[cfg(test)]
#[path = "build_output_tests.rs"]
mod tests;
