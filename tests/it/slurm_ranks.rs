//! A ddp training stage on the real test Slurm: one job whose batch script
//! starts the stage's two replicas with srun, one task each, which meet
//! through c10d at the first node of the job. It trains the bytes the same
//! stage trains here, where the worker starts the two ranks itself.

use pipe_test_support::slurm;

use crate::imdb_mirror::{project_with_pipeline, Mirror};

const TRAIN: &str = "train@precision=32-true,setup=ddp2-cpu";

/// The speed study cut to its ddp stage of two CPU replicas on a few rows,
/// trained for `epochs` at `batch_size`: `-S` pairs for `pipe run`.
fn study_args(epochs: u32, batch_size: u32) -> Vec<String> {
    [
        "precisions=[32-true]".to_string(),
        "setups=[ddp2-cpu]".to_string(),
        "split.train=16".to_string(),
        "split.val=4".to_string(),
        "split.test=4".to_string(),
        "tokenize.max_length=64".to_string(),
        format!("train.epochs={epochs}"),
        format!("train.batch_size={batch_size}"),
    ]
    .into_iter()
    .flat_map(|value| ["-S".to_string(), value])
    .collect()
}

#[test]
fn a_ddp_stage_on_slurm_runs_its_replicas_as_srun_tasks_and_trains_the_local_bytes() {
    let mirror = Mirror::start();
    let study = study_args(1, 4);
    let args: Vec<&str> = study.iter().map(String::as_str).collect();
    let local = project_with_pipeline("speed-study.yaml");
    let here = mirror.run(&local, "speed-study.yaml", &args);
    assert_eq!(here.code, 0, "{}", here.stderr);

    let cluster = project_with_pipeline("speed-study.yaml");
    let mut on_slurm: Vec<&str> = vec!["--executor", "slurm"];
    on_slurm.extend(&args);
    let there = mirror.run_with_env(
        &cluster,
        "speed-study.yaml",
        &on_slurm,
        &[("SLURM_CONF", slurm::conf().as_os_str())],
    );
    assert_eq!(there.code, 0, "{}", there.stderr);
    assert_eq!(there.status(TRAIN), "ran");

    // Submitted as one job of two tasks on one node, which srun started.
    let jobs = slurm::jobs_of(cluster.root());
    let shown: Vec<String> = jobs
        .iter()
        .map(|job| {
            let output = slurm::command("scontrol")
                .args(["show", "job", &job.id])
                .output()
                .unwrap();
            String::from_utf8_lossy(&output.stdout).into_owned()
        })
        .collect();
    let training: Vec<&String> = shown
        .iter()
        .filter(|text| text.contains("NumTasks=2"))
        .collect();
    assert_eq!(training.len(), 1, "{shown:#?}");
    assert!(
        shown
            .iter()
            .filter(|text| text.contains("NumTasks=1"))
            .count()
            == jobs.len() - 1,
        "{shown:#?}"
    );
    let log = std::fs::read_to_string(
        walk(&cluster.path(".pipe"))
            .into_iter()
            .find(|path| {
                path.to_string_lossy().contains(TRAIN)
                    && path.extension().is_some_and(|ext| ext == "log")
            })
            .expect("the training stage's log"),
    )
    .unwrap();
    assert!(
        log.contains("[rank1] rank 1 of 2 joined over gloo on cpu (1 node, started by srun)"),
        "{log}"
    );

    let checkpoint = format!(".pipe/out/speed-study/{TRAIN}/checkpoint/model.safetensors");
    assert!(
        std::fs::read(local.path(&checkpoint)).unwrap()
            == std::fs::read(cluster.path(&checkpoint)).unwrap(),
        "the replicas on Slurm trained other weights than here"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// `resources.nodes` is refused at its stage's line wherever it cannot
/// mean what it says: on this machine, on a command, and against a
/// training stage's `num_nodes`.
#[test]
fn nodes_that_cannot_be_honoured_are_located_errors() {
    let project = pipe_test_support::TestProject::new();
    let run = |yaml: &str| -> (i32, String) {
        project.write("pipe.yaml", yaml);
        let output = project
            .command()
            .args(["run", "pipe.yaml"])
            .output()
            .unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let train = |with: &str, resources: &str| {
        format!(
            "stages:\n  data:\n    run: mkdir -p tokens model\n    outs: [tokens, model]\n  train:\n    uses: train/classifier@1\n    with: {{ tokens: tokens, model: model, strategy: ddp, devices: 2{with} }}\n    resources: {resources}\n"
        )
    };

    let (code, stderr) = run(&train(", num_nodes: 2", "{ nodes: 2 }"));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("nodes-need-slurm"), "{stderr}");
    assert!(stderr.contains("pipe.yaml:5:"), "{stderr}");
    assert!(stderr.contains("--executor slurm"), "{stderr}");

    let (code, stderr) = run(&train("", "{ nodes: 2 }"));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("nodes-mismatch"), "{stderr}");
    assert!(stderr.contains("`num_nodes: 2`"), "{stderr}");

    let (code, stderr) = run("stages:\n  big:\n    run: echo hi\n    resources: { nodes: 3 }\n");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("nodes-unsupported"), "{stderr}");
    assert!(stderr.contains("pipe.yaml:4:"), "{stderr}");

    let (code, stderr) = run("stages:\n  none:\n    run: echo hi\n    resources: { nodes: 0 }\n");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("1 or more"), "{stderr}");
    // Nothing ran.
    assert!(!project.exists("tokens"));
}

/// The pid of a running `pipe-stage-train` that srun started as task
/// `task` (its environment says SLURM_PROCID) for the project at `root`
/// (its working directory is there), if any: other tests run ranks on the
/// same cluster at the same time.
fn srun_task_pid(root: &std::path::Path, task: usize) -> Option<i32> {
    let root = root.canonicalize().ok()?;
    let wanted = format!("SLURM_PROCID={task}");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let program = cmdline.split(|b| *b == 0).next()?;
            if !String::from_utf8_lossy(program).ends_with("pipe-stage-train") {
                return None;
            }
            let cwd = std::fs::read_link(entry.path().join("cwd")).ok()?;
            if !cwd.starts_with(&root) {
                return None;
            }
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            environ
                .split(|b| *b == 0)
                .any(|pair| pair == wanted.as_bytes())
                .then_some(pid)
        })
}

/// A rank killed on Slurm (kill -9, as the out-of-memory killer does) is
/// named in the stage's headline, as the local launcher names it, rather
/// than rank 0's SIGTERM from srun.
#[test]
fn a_rank_killed_on_slurm_is_named_in_the_stages_failure() {
    let mirror = Mirror::start();
    let cluster = project_with_pipeline("speed-study.yaml");
    let study = study_args(400, 2);
    let mut args = vec!["--executor", "slurm"];
    args.extend(study.iter().map(String::as_str));
    let result = std::thread::scope(|scope| {
        let run = scope.spawn(|| {
            mirror.run_with_env(
                &cluster,
                "speed-study.yaml",
                &args,
                &[("SLURM_CONF", slurm::conf().as_os_str())],
            )
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
        let victim = loop {
            if let (Some(_), Some(victim)) = (
                srun_task_pid(cluster.root(), 0),
                srun_task_pid(cluster.root(), 1),
            ) {
                break victim;
            }
            assert!(
                !run.is_finished() && std::time::Instant::now() < deadline,
                "the training ranks never ran"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        // Let the ranks meet and train a little first.
        std::thread::sleep(std::time::Duration::from_secs(3));
        // SAFETY: a plain kill(2) of a process this test found.
        unsafe { libc::kill(victim, libc::SIGKILL) };
        run.join().unwrap()
    });
    assert_ne!(result.code, 0, "{}", result.stderr);
    assert_eq!(result.status(TRAIN), "failed", "{}", result.stderr);
    let said = format!("{}\n{:?}", result.stderr, result.events);
    assert!(
        said.contains("rank 1 on ") && said.contains(" was killed (SIGKILL"),
        "{said}"
    );
}
