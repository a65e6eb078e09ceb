//! Which srun task ended a multi-task step: srun prints one line per task
//! that ended badly (`srun: error: node3: task 1: Killed`) and, under
//! `--kill-on-bad-exit`, terminates the others, whose own lines follow
//! (`task 0: Terminated`). The first task that ended of its own accord is
//! the one a person needs named, as the local launcher names it.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// How much of the stage log's end is read for srun's lines.
const TAIL_BYTES: u64 = 64 * 1024;

/// One task (or range of tasks) srun says ended badly.
#[derive(Debug, PartialEq, Eq)]
struct TaskEnd {
    node: String,
    tasks: String,
    reason: String,
}

/// `rank 1 on node3 was killed (SIGKILL: out of memory?)`-style headline
/// for the task that brought the step down, from the end of `log`; None
/// when srun named none, or only rank 0 exiting with an error code (rank 0
/// speaks pipe's protocol, and its own error says more).
pub(super) fn culprit(log: &Path) -> Option<String> {
    let mut file = std::fs::File::open(log).ok()?;
    let length = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(length.saturating_sub(TAIL_BYTES)))
        .ok()?;
    let mut bytes = Vec::new();
    file.take(TAIL_BYTES).read_to_end(&mut bytes).ok()?;
    culprit_in(&String::from_utf8_lossy(&bytes))
}

fn culprit_in(text: &str) -> Option<String> {
    let ends: Vec<TaskEnd> = text.lines().filter_map(task_end).collect();
    let first = ends
        .iter()
        .find(|end| end.reason != "Terminated")
        .or(ends.first())?;
    if first.tasks == "0" && first.reason.starts_with("Exited with exit code") {
        return None;
    }
    let rank = if first.tasks.contains(['-', ',']) {
        format!("ranks {}", first.tasks)
    } else {
        format!("rank {}", first.tasks)
    };
    let what = match first.reason.as_str() {
        "Killed" => "was killed (SIGKILL: the out-of-memory killer, or a kill -9)".to_string(),
        "Terminated" => "was terminated (SIGTERM)".to_string(),
        reason => match reason.strip_prefix("Exited with exit code ") {
            Some(code) => format!("exited with code {code}"),
            None => format!("ended: {reason}"),
        },
    };
    Some(format!(
        "{rank} on {} {what}, and srun stopped the other ranks",
        first.node
    ))
}

/// `srun: error: NODE: task N: REASON` or `... tasks A-B,C: REASON`.
fn task_end(line: &str) -> Option<TaskEnd> {
    let rest = line.trim().strip_prefix("srun: error: ")?;
    let (node, rest) = rest.split_once(": ")?;
    let rest = rest
        .strip_prefix("tasks ")
        .or_else(|| rest.strip_prefix("task "))?;
    let (tasks, reason) = rest.split_once(": ")?;
    let tasks_are_numbers = !tasks.is_empty()
        && tasks
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'-' || b == b',');
    if node.is_empty() || node.contains(char::is_whitespace) || !tasks_are_numbers {
        return None;
    }
    Some(TaskEnd {
        node: node.to_string(),
        tasks: tasks.to_string(),
        reason: reason.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_that_ended_first_of_its_own_accord_is_named() {
        let log = "[rank1] epoch 1\n\
                   srun: error: node3: task 0: Terminated\n\
                   srun: error: node3: task 1: Killed\n\
                   srun: Force Terminated StepId=12.0\n";
        assert_eq!(
            culprit_in(log).unwrap(),
            "rank 1 on node3 was killed (SIGKILL: the out-of-memory killer, or a kill -9), \
             and srun stopped the other ranks"
        );
        assert_eq!(
            culprit_in("srun: error: gpu2: tasks 2-3: Exited with exit code 1\n").unwrap(),
            "ranks 2-3 on gpu2 exited with code 1, and srun stopped the other ranks"
        );
        // Rank 0's own error event says more than its exit code.
        assert_eq!(
            culprit_in("srun: error: node1: task 0: Exited with exit code 1\n"),
            None
        );
        assert_eq!(culprit_in("error: something else\nsrun: error: x\n"), None);
        assert_eq!(
            culprit_in("srun: error: node1: task 1; rm -rf: Killed\n"),
            None,
            "not srun's shape"
        );
    }
}
