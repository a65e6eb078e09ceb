//! Running a stage's process: its own process group (recorded for
//! `kill -9` recovery), dying with pipe, Ctrl-C, and nothing left running
//! after it exits.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::context::Context;
use super::failure::StageFailure;
use crate::events::Event;
use crate::groups::{self, GroupRecord};
use crate::interrupt;
use crate::pipeline::{Stage, StageKind};

/// `run: "..."` runs under bash; `run: [...]` runs its program directly,
/// a relative program path (`./train.sh`) taken from the project root.
pub(super) fn command_process(kind: &StageKind, root: &Path) -> Result<Command, StageFailure> {
    match kind {
        StageKind::Argv { argv } if !argv.is_empty() => {
            let program = Path::new(&argv[0]);
            let mut process = if program.is_relative() && argv[0].contains('/') {
                Command::new(root.join(program))
            } else {
                Command::new(program)
            };
            process.args(&argv[1..]);
            Ok(process)
        }
        StageKind::Command { command } => {
            let mut shell = Command::new("bash");
            shell.args(["-e", "-o", "pipefail", "-c", command]);
            Ok(shell)
        }
        _ => Err(StageFailure::Contract(
            "the stage has no command to run".to_string(),
        )),
    }
}

/// Reads a worker's event stream (its stdout) as it comes.
pub(super) type ReadEvents<'a> = &'a mut dyn FnMut(&mut dyn Read) -> Result<(), StageFailure>;

/// Starts `command` for `stage` in its own process group with the stage's
/// environment, lets `read_events` consume its stdout (if piped), and
/// waits for it and for every process it left in its group.
pub(super) fn spawn_and_wait(
    context: &Context<'_>,
    index: usize,
    stage: &Stage,
    gpus: &[String],
    mut command: Command,
    log_path: &Path,
    read_events: Option<ReadEvents<'_>>,
) -> Result<std::process::ExitStatus, StageFailure> {
    let run_id = context.run.id_for_stage()?;
    command
        .current_dir(context.root_of(stage))
        .stdin(Stdio::null())
        .env("PIPE_STAGE", &stage.name)
        .env("PIPE_RUN_ID", run_id.to_string())
        .process_group(0);
    for (name, value) in &stage.env {
        command.env(name, value);
    }
    if !gpus.is_empty() {
        command.env("CUDA_VISIBLE_DEVICES", gpus.join(","));
    }
    let record = GroupRecord::for_stage(&context.project.state_dir, index);
    record.prepare().map_err(|e| {
        StageFailure::io(
            "cannot record the stage's process group in `.pipe/groups/`",
            e,
        )
    })?;
    let record_in_child = record.clone();
    let pipe_pid = std::process::id();
    // SAFETY: the closure runs between fork and exec and makes only
    // async-signal-safe calls: prctl, getppid, and the record's raw I/O.
    unsafe {
        command.pre_exec(move || {
            // The stage's first process dies with pipe, however pipe dies
            // (kill -9, the OOM killer). The signal follows the thread that
            // forked, not the process: this thread waits for the child
            // below, so it lives as long as the stage.
            #[cfg(target_os = "linux")]
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // pipe may have died before the signal was armed.
            if libc::getppid() as u32 != pipe_pid {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            // Processes the stage starts do not die with pipe; the record
            // lets the next run find and stop them.
            record_in_child.write_from_child()
        });
    }
    (context.observer)(Event::StageRunning {
        stage: &stage.name,
        log: log_path,
    });
    let program = command.get_program().to_string_lossy().to_string();
    let mut child = command
        .spawn()
        .map_err(|e| StageFailure::io(format!("cannot start `{program}`"), e))?;
    let group = child.id();
    {
        let mut running = context
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        running.insert(index, group);
    }
    if interrupt::requested() {
        // SAFETY: the group was just created by this spawn.
        unsafe {
            libc::kill(-(group as libc::pid_t), libc::SIGTERM);
        }
    }
    let read = match (read_events, child.stdout.as_mut()) {
        (Some(read), Some(stdout)) => read(stdout),
        _ => Ok(()),
    };
    let status = child.wait();
    let leftovers = stop_leftovers(stage, group, log_path);
    context
        .running
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .remove(&index);
    leftovers?;
    record.remove();
    let status =
        status.map_err(|e| StageFailure::io(format!("waiting for `{program}` failed"), e))?;
    if interrupt::requested() {
        return Err(StageFailure::Interrupted);
    }
    read?;
    Ok(status)
}

/// How long a process that a stage left behind gets to exit after SIGTERM.
pub(super) const LEFTOVER_GRACE: Duration = Duration::from_secs(1);

/// A stage's outputs are stored only once none of its processes can still
/// write them: whatever its command left running in its group (`cmd &`
/// without `wait`) is stopped, and the user is told.
pub(super) fn stop_leftovers(
    stage: &Stage,
    group: u32,
    log_path: &Path,
) -> Result<(), StageFailure> {
    let group = group as libc::pid_t;
    match groups::stop(group, libc::SIGTERM, LEFTOVER_GRACE) {
        Ok(found) if found.is_empty() || interrupt::requested() => Ok(()),
        Ok(found) => {
            let count = found.len();
            let message = format!(
                "the command left {count} process{} running after it exited (pid {}); \
                 pipe stopped {} before storing the outputs. \
                 Wait for background jobs in the command (`wait`)",
                if count == 1 { "" } else { "es" },
                found.iter().map(i32::to_string).collect::<Vec<_>>().join(", "),
                if count == 1 { "it" } else { "them" },
            );
            tracing::warn!("stage `{}`: {message}", stage.name);
            if let Ok(mut log) = std::fs::OpenOptions::new().append(true).open(log_path) {
                use std::io::Write;
                let _ = writeln!(log, "pipe: {message}");
            }
            Ok(())
        }
        Err(survivors) => Err(StageFailure::Contract(format!(
            "the command left processes running that survive SIGKILL (pid {survivors:?}); nothing was cached"
        ))),
    }
}

pub(super) fn check_exit(
    status: std::process::ExitStatus,
    what: &'static str,
) -> Result<(), StageFailure> {
    if status.success() {
        Ok(())
    } else {
        Err(StageFailure::Exited { what, status })
    }
}
