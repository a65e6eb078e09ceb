//! The rank processes of a data-parallel run (src/launch.rs) when one of
//! them fails the way ranks fail in real life: killed with SIGKILL in the
//! middle of an epoch (the OOM killer), or stopped (a hung NFS read, a
//! debugger). Through the real `pipe-stage-train` worker, two ranks over
//! Gloo on the CPU.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pipe_test_support::worker::invocation;
use serde_json::{json, Value};

use crate::train::{model_dir, tokens};

fn worker() -> String {
    std::env::var("PIPE_TRAIN_WORKER")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_pipe-stage-train").to_string())
}

/// A long ddp run on two CPU ranks, started and left running.
fn start_long_ddp(dir: &Path, timeout_s: u64) -> (Child, mpsc::Receiver<Value>) {
    let tokens = tokens(dir);
    let model = model_dir(dir, "tiny-bert", 5);
    let params = json!({
        "tokens": tokens, "model": model, "num_labels": 2, "epochs": 200, "batch_size": 2,
        "lr": 1e-3, "weight_decay": 0.0, "warmup_ratio": 0.0, "accumulate_grad_batches": 1,
        "gradient_clip_val": null, "seed": 1, "limit_train_samples": null,
        "early_stopping_patience": null, "precision": "32-true", "strategy": "ddp",
        "devices": 2, "collective_timeout": timeout_s,
    });
    let run_dir = dir.join("ddp");
    std::fs::create_dir_all(&run_dir).unwrap();
    let file = run_dir.join("invocation.json");
    let invocation = invocation(&run_dir, "train", "train/classifier", params, None, 2);
    std::fs::write(&file, invocation.to_string()).unwrap();
    let mut child = Command::new(worker())
        .args(["run", "--invocation"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let event: Value = serde_json::from_str(&line).unwrap_or(json!({"raw": line}));
            if sender.send(event).is_err() {
                break;
            }
        }
    });
    (child, receiver)
}

/// Events until rank 0 reports a training step, which the ranks reach
/// only together.
fn until_training(events: &mpsc::Receiver<Value>) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let event = events
            .recv_timeout(Duration::from_secs(300))
            .expect("no training progress from the ranks");
        let training = event["event"] == "progress"
            && event["phase"]
                .as_str()
                .is_some_and(|p| p.starts_with("train epoch"))
            && event["done"].as_u64().is_some_and(|done| done > 0);
        seen.push(event);
        if training {
            return seen;
        }
    }
}

/// The rank processes the worker started: (rank, pid), from /proc.
fn ranks_of(worker: u32) -> Vec<(usize, i32)> {
    let mut ranks = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{worker}/task")).unwrap() {
        let children =
            std::fs::read_to_string(task.unwrap().path().join("children")).unwrap_or_default();
        for pid in children.split_whitespace() {
            let pid: i32 = pid.parse().unwrap();
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let rank = environ
                .split(|byte| *byte == 0)
                .filter_map(|pair| std::str::from_utf8(pair).ok())
                .find_map(|pair| pair.strip_prefix("PIPE_RANK="))
                .and_then(|rank| rank.parse().ok());
            if let Some(rank) = rank {
                ranks.push((rank, pid));
            }
        }
    }
    ranks.sort();
    ranks
}

fn alive(pid: i32) -> bool {
    // A zombie is dead; only its entry in the table remains.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// Waits for the worker to end (a guard against a hang, not a timing
/// assertion) and returns its events after `seen`.
fn finish(
    mut child: Child,
    events: mpsc::Receiver<Value>,
    mut seen: Vec<Value>,
) -> (bool, Vec<Value>) {
    let guard = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if guard.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            panic!("the worker did not end after its rank failed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    seen.extend(events.iter());
    (status.success(), seen)
}

fn error_of(events: &[Value]) -> String {
    let last = events.last().expect("no event");
    assert_eq!(last["event"], "error", "{last}");
    format!(
        "{} | {}",
        last["message"].as_str().unwrap_or(""),
        last["hint"].as_str().unwrap_or("")
    )
}

fn assert_no_rank_left(ranks: &[(usize, i32)]) {
    for (rank, pid) in ranks {
        let guard = Instant::now();
        while alive(*pid) && guard.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!alive(*pid), "rank {rank} (pid {pid}) outlived the stage");
    }
}

#[test]
fn a_rank_killed_mid_epoch_fails_the_stage_naming_it_and_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let (child, events) = start_long_ddp(dir.path(), 60);
    let seen = until_training(&events);
    let ranks = ranks_of(child.id());
    assert_eq!(
        ranks.iter().map(|(rank, _)| *rank).collect::<Vec<_>>(),
        [0, 1],
        "{ranks:?}"
    );
    // SAFETY: kill(2) on a pid of our grandchild, still running.
    assert_eq!(unsafe { libc::kill(ranks[1].1, libc::SIGKILL) }, 0);
    let (success, events) = finish(child, events, seen);
    assert!(!success);
    let error = error_of(&events);
    assert!(error.contains("rank 1 of 2 failed"), "{error}");
    assert!(error.contains("signal 9"), "{error}");
    assert!(error.contains("its last line"), "{error}");
    // Every rank's messages reach the stage's log with its rank in front.
    let messages: Vec<&str> = events
        .iter()
        .filter(|event| event["event"] == "message")
        .filter_map(|event| event["text"].as_str())
        .collect();
    assert!(
        messages
            .iter()
            .any(|text| text.starts_with("[rank0] training on")),
        "{messages:?}"
    );
    assert_no_rank_left(&ranks);
}

#[test]
fn a_rank_that_stops_answering_is_named_when_the_others_time_out() {
    let dir = tempfile::tempdir().unwrap();
    let (child, events) = start_long_ddp(dir.path(), 3);
    let seen = until_training(&events);
    let ranks = ranks_of(child.id());
    assert_eq!(ranks.len(), 2, "{ranks:?}");
    // SAFETY: as above; SIGSTOP leaves it alive and silent.
    assert_eq!(unsafe { libc::kill(ranks[1].1, libc::SIGSTOP) }, 0);
    let (success, events) = finish(child, events, seen);
    assert!(!success);
    let error = error_of(&events);
    assert!(error.contains("rank 1"), "{error}");
    assert!(error.contains("stopped answering"), "{error}");
    assert!(error.contains("timed out after 3 s"), "{error}");
    assert!(error.contains("collective_timeout"), "{error}");
    assert_no_rank_left(&ranks);
}

/// What `kill -9` of pipe comes to for the ranks: pipe's death kills the
/// worker (the engine's PR_SET_PDEATHSIG), and the worker's kills its ranks.
#[test]
fn the_ranks_die_with_a_killed_launcher() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, events) = start_long_ddp(dir.path(), 60);
    let _ = until_training(&events);
    let ranks = ranks_of(child.id());
    assert_eq!(ranks.len(), 2, "{ranks:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_no_rank_left(&ranks);
}

/// The same ddp run on two ranks, started by pipe's launcher and by
/// Slurm's srun (two tasks on the test cluster's one node, each reading its
/// place from SLURM_PROCID, SLURM_NTASKS and SLURM_JOB_NODELIST), trains
/// the same bytes.
#[test]
fn a_two_task_srun_step_trains_the_bytes_of_the_local_two_process_run() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 9);
    let params = json!({
        "tokens": tokens, "model": model, "num_labels": 2, "epochs": 2, "batch_size": 4,
        "lr": 1e-3, "weight_decay": 0.01, "warmup_ratio": 0.0, "accumulate_grad_batches": 1,
        "gradient_clip_val": null, "seed": 3, "limit_train_samples": 96,
        "early_stopping_patience": null, "precision": "32-true", "strategy": "ddp",
        "devices": 2,
    });
    // Launched here: 2 threads split into one per rank.
    let local_dir = dir.path().join("local");
    let local = pipe_test_support::worker::run_invocation(
        &worker(),
        &local_dir,
        &invocation(
            &local_dir,
            "train",
            "train/classifier",
            params.clone(),
            None,
            2,
        ),
    );
    assert!(local.success, "{}", local.error());

    // Launched by srun: one thread per task, as above.
    let slurm_dir = dir.path().join("srun");
    std::fs::create_dir_all(&slurm_dir).unwrap();
    let file = slurm_dir.join("invocation.json");
    std::fs::write(
        &file,
        invocation(&slurm_dir, "train", "train/classifier", params, None, 1).to_string(),
    )
    .unwrap();
    let output = pipe_test_support::slurm::command("srun")
        .args([
            "--ntasks=2",
            "--nodes=1",
            "--cpus-per-task=1",
            "--kill-on-bad-exit=1",
        ])
        .arg(worker())
        .args(["run", "--invocation"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "srun failed:\n{stdout}\n{stderr}");
    // Only rank 0 speaks the protocol on the shared stdout; rank 1's lines
    // are on stderr with its rank in front.
    let events: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not an event: {line}")))
        .collect();
    assert_eq!(
        events
            .iter()
            .filter(|event| event["event"] == "done")
            .count(),
        1,
        "{stdout}"
    );
    assert!(
        stderr.contains("[rank1] rank 1 of 2 joined over gloo"),
        "{stderr}"
    );
    assert!(
        events
            .iter()
            .any(|event| event["text"].as_str().is_some_and(|text| text
                .contains("rank 0 of 2 joined over gloo on cpu (1 node, started by srun)"))),
        "{stdout}"
    );
    let read = |dir: &Path| std::fs::read(dir.join("out/checkpoint/model.safetensors")).unwrap();
    assert!(
        read(&local_dir) == read(&slurm_dir),
        "srun's ranks trained other weights"
    );
}

/// torchrun, the launcher every PyTorch cluster convention builds on:
/// the `torchrun` of the bootstrap's torch, found beside the python on
/// PATH (scripts/bootstrap-libtorch.sh puts it there).
fn torchrun() -> std::path::PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("torchrun"))
        .find(|candidate| candidate.is_file())
        .expect("torchrun on PATH: run scripts/bootstrap-libtorch.sh --print-env and eval it")
}

/// A free TCP port on 127.0.0.1, for torchrun's store.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Two torchrun agents on this machine as two "nodes" (`--nnodes 2
/// --node-rank 0|1`, one process each, their agent hosting the store):
/// each rank reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
/// MASTER_PORT, the group's keys live under torchrun's attempt prefix,
/// Gloo takes GLOO_SOCKET_IFNAME as a list as torch does, and the two
/// ranks train the bytes pipe's own launcher trains with 2 devices.
#[test]
fn two_torchrun_nodes_train_the_bytes_of_the_local_two_process_run() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 13);
    let params = |devices: usize, nodes: usize| {
        json!({
            "tokens": tokens, "model": model, "num_labels": 2, "epochs": 2, "batch_size": 4,
            "lr": 1e-3, "weight_decay": 0.01, "warmup_ratio": 0.0, "accumulate_grad_batches": 1,
            "gradient_clip_val": null, "seed": 3, "limit_train_samples": 96,
            "early_stopping_patience": null, "precision": "32-true", "strategy": "ddp",
            "devices": devices, "num_nodes": nodes,
        })
    };
    let local_dir = dir.path().join("local");
    let local = pipe_test_support::worker::run_invocation(
        &worker(),
        &local_dir,
        &invocation(
            &local_dir,
            "train",
            "train/classifier",
            params(2, 1),
            None,
            2,
        ),
    );
    assert!(local.success, "{}", local.error());

    let nodes_dir = dir.path().join("torchrun");
    std::fs::create_dir_all(&nodes_dir).unwrap();
    let file = nodes_dir.join("invocation.json");
    std::fs::write(
        &file,
        invocation(
            &nodes_dir,
            "train",
            "train/classifier",
            params(1, 2),
            None,
            1,
        )
        .to_string(),
    )
    .unwrap();
    let interfaces = if Path::new("/sys/class/net/eth0").exists() {
        "lo,eth0"
    } else {
        "lo"
    };
    let port = free_port().to_string();
    let agents: Vec<Child> = (0..2)
        .map(|node| {
            Command::new(torchrun())
                .args(["--nnodes", "2", "--nproc-per-node", "1", "--node-rank"])
                .arg(node.to_string())
                .args(["--master-addr", "127.0.0.1", "--master-port", &port])
                .args(["--max-restarts", "0", "--no-python"])
                .arg(worker())
                .args(["run", "--invocation"])
                .arg(&file)
                .env("GLOO_SOCKET_IFNAME", interfaces)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<_> = agents
        .into_iter()
        .map(|agent| agent.wait_with_output().unwrap())
        .collect();
    for (node, output) in outputs.iter().enumerate() {
        assert!(
            output.status.success(),
            "torchrun node {node} failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Rank 0 (node 0) speaks the protocol; rank 1's lines are on its
    // stderr, with its rank in front.
    let stdout = String::from_utf8_lossy(&outputs[0].stdout);
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    assert!(
        events
            .iter()
            .any(|event| event["text"].as_str().is_some_and(|text| {
                text.contains("rank 0 of 2 joined over gloo on cpu (2 nodes, started by torchrun)")
            })),
        "{stdout}"
    );
    assert_eq!(
        events.iter().filter(|e| e["event"] == "done").count(),
        1,
        "{stdout}"
    );
    let rank1 = String::from_utf8_lossy(&outputs[1].stderr);
    assert!(
        rank1.contains("[rank1] rank 1 of 2 joined over gloo"),
        "{rank1}"
    );
    assert!(
        !String::from_utf8_lossy(&outputs[1].stdout).contains("\"event\""),
        "rank 1 spoke the protocol"
    );
    let read = |dir: &Path| std::fs::read(dir.join("out/checkpoint/model.safetensors")).unwrap();
    assert!(
        read(&local_dir) == read(&nodes_dir),
        "torchrun's ranks trained other weights"
    );
}
