//! The CI flow of docs/ci.md as a team meets it, through the real binary
//! against a real S3 server (s3s-fs on 127.0.0.1), every job a fresh
//! depth-1 fetch of a bare origin as `actions/checkout` makes it: main's
//! job runs and pushes; a pull request's job runs its merge commit and the
//! diff step of examples/ci/github-actions-tool.yml, verbatim, whose
//! summary names both sides, base first; a fork's job, with the empty
//! credentials GitHub gives it, reads a public-read bucket anonymously and
//! gets its diff, or, where the bucket grants no public read, says the
//! remote could not be read, and says "no run" only where the remote holds
//! none; two jobs of one commit whose metric differs run at once and a
//! third clone sees both records; the merge commit's run is selected by
//! its branch on a laptop.

use std::path::{Path, PathBuf};
use std::process::Output;

use pipe_test_support::s3::Server;
use pipe_test_support::{git, RunResult, TestProject};
use serde_json::Value;

const PIPELINE: &str = r#"params:
  lr: 0.1
  epochs: 2
key_metrics: [train.accuracy]
stages:
  prepare:
    run: seq 1 200 > data.txt
    outs: [data.txt]
  train:
    run: sh train.sh ${params.lr} ${params.epochs}
    deps: [data.txt, train.sh]
    outs: [model.txt]
    metrics: [train_metrics.json]
  evaluate:
    run: >-
      printf '{"lines": %s}' "$(wc -l < model.txt)" > eval.json
    deps: [model.txt]
    metrics: [eval.json]
"#;

/// Training whose metrics hold the time it ran: two jobs of one commit
/// make two results for one key. Jobs given `SYNC_DIR` wait here for each
/// other (a bound of 30 s, not an assertion), so both compute it.
const TRAIN: &str = r#"if [ -n "${SYNC_DIR:-}" ]; then
  touch "$SYNC_DIR/$$"
  i=0
  while [ "$(ls "$SYNC_DIR" | wc -l)" -lt 2 ] && [ "$i" -lt 600 ]; do
    sleep 0.05
    i=$((i + 1))
  done
fi
echo "lr $1 epochs $2" > model.txt
awk -v lr="$1" 'BEGIN { printf "{\"accuracy\": %.3f, ", 0.5 + lr }' > train_metrics.json
printf '"started_ns": %s}' "$(date +%s%N)" >> train_metrics.json
"#;

const PREFIX: &str = "team";

type Env = Vec<(String, String)>;

/// The origin every job fetches from, the developers' clone that pushes
/// to it, and the S3 server with a public-read view of the same bucket.
struct Team {
    server: Server,
    public: Server,
    origin: tempfile::TempDir,
    dev: TestProject,
}

impl Team {
    fn new() -> Team {
        let origin = tempfile::tempdir().unwrap();
        git(origin.path(), &["init", "-q", "--bare", "-b", "main"]);
        let dev = TestProject::new();
        dev.write("pipe.yaml", PIPELINE);
        dev.write("train.sh", TRAIN);
        dev.write(
            ".gitignore",
            "/data.txt\n/model.txt\n/train_metrics.json\n/eval.json\n",
        );
        git(dev.root(), &["init", "-q", "-b", "main"]);
        git(dev.root(), &["add", "-A"]);
        git(dev.root(), &["commit", "-qm", "the project"]);
        let server = Server::start();
        let team = Team {
            public: server.public_view(),
            server,
            origin,
            dev,
        };
        git(team.dev.root(), &["remote", "add", "origin", &team.url()]);
        git(team.dev.root(), &["push", "-q", "origin", "main"]);
        team
    }

    fn url(&self) -> String {
        format!("file://{}", self.origin.path().display())
    }

    /// A new commit on branch `branch` (from main) with `from` replaced by
    /// `to` in pipe.yaml, pushed; its full id.
    fn commit_on(&self, branch: &str, from: &str, to: &str) -> String {
        let dev = self.dev.root();
        git(dev, &["checkout", "-q", "-B", branch, "main"]);
        let changed = self.dev.read("pipe.yaml").replace(from, to);
        self.dev.write("pipe.yaml", &changed);
        git(dev, &["commit", "-qam", &format!("{from} -> {to}")]);
        git(dev, &["push", "-q", "-f", "origin", branch]);
        git(dev, &["checkout", "-q", "main"]);
        git(dev, &["rev-parse", branch])
    }

    /// GitHub's `refs/pull/N/merge`: `branch` merged into main, a commit no
    /// branch names; its full id.
    fn pull_request(&self, number: u32, branch: &str) -> String {
        let dev = self.dev.root();
        git(dev, &["checkout", "-q", "--detach", "main"]);
        git(dev, &["merge", "-q", "--no-ff", "--no-edit", branch]);
        git(
            dev,
            &[
                "push",
                "-q",
                "-f",
                "origin",
                &format!("HEAD:refs/pull/{number}/merge"),
            ],
        );
        let merge = git(dev, &["rev-parse", "HEAD"]);
        git(dev, &["checkout", "-q", "main"]);
        merge
    }

    /// A CI job's checkout, as `actions/checkout` makes it: an empty
    /// directory, `origin`, one ref fetched at depth 1, checked out
    /// detached.
    fn job(&self, fetched: &str) -> TestProject {
        let job = TestProject::new();
        git(job.root(), &["init", "-q", "-b", "ci"]);
        git(job.root(), &["remote", "add", "origin", &self.url()]);
        git(
            job.root(),
            &[
                "fetch",
                "-q",
                "--no-tags",
                "--depth=1",
                "origin",
                &format!("+{fetched}:refs/ci/head"),
            ],
        );
        git(job.root(), &["checkout", "-q", "--detach", "refs/ci/head"]);
        job
    }

    /// A job's environment with the write key, plus `ci`.
    fn with_key(&self, ci: &[(&str, &str)]) -> Env {
        let mut env = self.server.env(PREFIX);
        env.extend(ci.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    }

    /// A fork's pull request on GitHub: read-only, its secrets withheld,
    /// which GitHub gives as empty strings; the remote at `endpoint`.
    fn fork_env(&self, endpoint: &str, head: &str) -> Env {
        [
            ("PIPE_REMOTE", self.server.url(PREFIX)),
            ("PIPE_REMOTE_ENDPOINT", endpoint.to_string()),
            ("PIPE_REMOTE_READ_ONLY", "1".to_string()),
            ("AWS_REGION", "us-east-1".to_string()),
            ("AWS_ACCESS_KEY_ID", String::new()),
            ("AWS_SECRET_ACCESS_KEY", String::new()),
            ("GITHUB_EVENT_NAME", "pull_request".to_string()),
            ("GITHUB_HEAD_REF", head.to_string()),
            ("GITHUB_BASE_REF", "main".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

fn run_job(job: &TestProject, env: &Env) -> RunResult {
    let result = job.run_with_env(env, &[]);
    assert_eq!(result.code, 0, "pipe run failed:\n{}", result.stderr);
    result
}

fn pipe(job: &TestProject, env: &Env, args: &[&str]) -> Output {
    job.std_command()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(args)
        .output()
        .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json(output: &Output) -> Value {
    assert!(output.status.success(), "{}", stderr(output));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn last_uid(job: &TestProject) -> String {
    json(&job.pipe(&["show", "last", "--json"]))["uid"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The `run: |` script of the step `name` in the workflow `file`, as a
/// job runs it.
fn workflow_step(file: &str, name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let indent = |line: &str| line.len() - line.trim_start().len();
    let step = lines
        .iter()
        .position(|line| line.trim() == format!("- name: {name}"))
        .unwrap_or_else(|| panic!("no step `{name}` in {file}"));
    let run = step
        + lines[step..]
            .iter()
            .position(|line| line.trim() == "run: |")
            .unwrap_or_else(|| panic!("step `{name}` has no `run: |`"));
    let body: Vec<&str> = lines[run + 1..]
        .iter()
        .take_while(|line| line.trim().is_empty() || indent(line) > indent(lines[run]))
        .copied()
        .collect();
    let margin = body
        .iter()
        .filter(|line| !line.trim().is_empty())
        .map(|line| indent(line))
        .min()
        .unwrap_or(0);
    body.iter()
        .map(|line| line.get(margin..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The pull request's diff step of examples/ci/github-actions-tool.yml,
/// run as GitHub runs it (`bash -eo pipefail`), with `pipe` on PATH; what
/// it wrote to the job summary.
fn diff_step(job: &TestProject, env: &Env) -> String {
    let script = workflow_step(
        "examples/ci/github-actions-tool.yml",
        "Diff against the base branch",
    );
    let pipe_dir: PathBuf = assert_cmd::cargo::cargo_bin("pipe")
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        pipe_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Each step has a summary file of its own.
    let summary = job.path("step-summary.md");
    let _ = std::fs::remove_file(&summary);
    let output = job
        .std_command_of(Path::new("bash"))
        .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", &script])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("BASE", "main")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the step failed: {}",
        stderr(&output)
    );
    std::fs::read_to_string(summary).unwrap()
}

fn short(commit: &str) -> &str {
    &commit[..7]
}

#[test]
fn the_ci_flow_main_a_pull_request_a_fork_and_concurrent_jobs_against_s3() {
    let team = Team::new();
    let main = git(team.dev.root(), &["rev-parse", "main"]);

    // main's job: everything runs and is pushed, the record too.
    let main_job = team.job("refs/heads/main");
    let pushed = run_job(
        &main_job,
        &team.with_key(&[
            ("GITHUB_EVENT_NAME", "push"),
            ("GITHUB_REF_TYPE", "branch"),
            ("GITHUB_REF_NAME", "main"),
        ]),
    );
    assert_eq!(pushed.ran(), ["evaluate", "prepare", "train"]);
    let remote = pushed
        .events
        .iter()
        .find(|event| event["event"] == "remote")
        .unwrap();
    assert_eq!(remote["record_pushed"], true, "{remote}");

    // A pull request from a branch of the repository: its merge commit
    // runs, and the workflow's diff step compares it with main's run.
    let lr_head = team.commit_on("lr-tune", "lr: 0.1", "lr: 0.3");
    let merge = team.pull_request(1, "lr-tune");
    let pr_job = team.job("refs/pull/1/merge");
    let pr_env = team.with_key(&[
        ("GITHUB_EVENT_NAME", "pull_request"),
        ("GITHUB_HEAD_REF", "lr-tune"),
        ("GITHUB_BASE_REF", "main"),
    ]);
    let pr_run = run_job(&pr_job, &pr_env);
    assert_eq!(pr_run.status("prepare"), "restored");
    assert_eq!(pr_run.status("train"), "ran");
    let pr_uid = last_uid(&pr_job);
    let summary = diff_step(&pr_job, &pr_env);
    let title = summary.lines().next().unwrap_or_default();
    let (base_side, head_side) = (
        format!("main @ {}", short(&main)),
        format!("lr-tune @ {}", short(&merge)),
    );
    let (base_at, head_at) = (title.find(&base_side), title.find(&head_side));
    assert!(
        base_at.is_some() && head_at.is_some() && base_at < head_at,
        "the comment names main first, then the branch: {summary}"
    );
    assert!(summary.contains("0.3"), "the changed param: {summary}");

    // A fork's pull request: no credentials, read-only. The bucket grants
    // public read: results and main's run are read anonymously, the diff
    // is made, and nothing is written.
    team.commit_on("fork-idea", "epochs: 2", "epochs: 5");
    team.pull_request(2, "fork-idea");
    let bucket = team.server.files();
    let fork_job = team.job("refs/pull/2/merge");
    let fork_env = team.fork_env(&team.public.endpoint(), "fork-idea");
    let fork_run = run_job(&fork_job, &fork_env);
    assert_eq!(
        fork_run.status("prepare"),
        "restored",
        "{}",
        fork_run.stderr
    );
    assert!(
        fork_run.stderr.contains("reading it anonymously"),
        "{}",
        fork_run.stderr
    );
    let summary = diff_step(&fork_job, &fork_env);
    assert!(
        summary.contains(&format!("main @ {}", short(&main))) && summary.contains("fork-idea @"),
        "the fork gets its diff: {summary}"
    );
    // Not read-only, it still writes nothing without credentials.
    let mut writable = fork_env.clone();
    writable.retain(|(name, _)| name != "PIPE_REMOTE_READ_ONLY");
    let push = pipe(&fork_job, &writable, &["cache", "push"]);
    assert_eq!(push.status.code(), Some(6), "{}", stderr(&push));
    assert!(
        stderr(&push).contains("cannot be written without credentials"),
        "{}",
        stderr(&push)
    );
    assert_eq!(team.server.files(), bucket, "a fork wrote to the bucket");

    // A bucket without public read: the fork's summary says the remote
    // could not be read (exit code 6), never that main has no run.
    let denied_job = team.job("refs/pull/2/merge");
    let denied_env = team.fork_env(&team.server.endpoint(), "fork-idea");
    run_job(&denied_job, &denied_env);
    let summary = diff_step(&denied_job, &denied_env);
    assert!(
        summary.contains("the remote cache could not be read")
            && summary.contains("refuses anonymous reads")
            && !summary.contains("nothing to compare"),
        "{summary}"
    );
    let diff = pipe(&denied_job, &denied_env, &["diff", "origin/main", "last"]);
    assert_eq!(diff.status.code(), Some(6), "{}", stderr(&diff));

    // main moves on and its job has not run yet: the fork that can read
    // says there is no run of main's new commit, here or in the remote.
    let epochs_3 = team.commit_on("main", "epochs: 2", "epochs: 3");
    let summary = diff_step(&fork_job, &fork_env);
    assert!(
        summary.contains("pipe found nothing to compare with")
            && summary.contains(&format!(
                "no run was recorded at commit {}, here or in the remote cache",
                &epochs_3[..12]
            )),
        "{summary}"
    );

    // Two jobs of that commit at once, each computing `train` (its
    // metrics differ): both records reach the bucket, and a third clone
    // keeps both, the second result's run marked superseded.
    let sync = tempfile::tempdir().unwrap();
    let mut concurrent_env = team.with_key(&[
        ("GITHUB_EVENT_NAME", "push"),
        ("GITHUB_REF_TYPE", "branch"),
        ("GITHUB_REF_NAME", "main"),
    ]);
    concurrent_env.push(("SYNC_DIR".into(), sync.path().display().to_string()));
    let jobs = [team.job("refs/heads/main"), team.job("refs/heads/main")];
    let children: Vec<_> = jobs
        .iter()
        .map(|job| {
            job.std_command()
                .envs(concurrent_env.iter().map(|(k, v)| (k, v)))
                .args(["run", "--json"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let result = RunResult::from_output(child.wait_with_output().unwrap());
        assert_eq!(result.code, 0, "{}", result.stderr);
        assert_eq!(result.status("train"), "ran", "both computed it");
    }
    let uids: Vec<String> = jobs.iter().map(last_uid).collect();
    let laptop = TestProject::new();
    git(laptop.root(), &["clone", "-q", &team.url(), "."]);
    let key = team.with_key(&[]);
    let pulled = pipe(&laptop, &key, &["cache", "pull"]);
    assert!(pulled.status.success(), "{}", stderr(&pulled));
    assert!(!stderr(&pulled).contains("skipped"), "{}", stderr(&pulled));
    let runs = json(&laptop.pipe(&["runs", "-n", "100", "--json"]));
    let runs = runs.as_array().unwrap();
    for uid in &uids {
        assert!(
            runs.iter().any(|run| run["uid"] == uid.as_str()),
            "run {uid} of a concurrent job is missing: {runs:?}"
        );
    }
    let superseded: Vec<&Value> = runs
        .iter()
        .filter(|run| run["unverified"].to_string().contains("superseded.train"))
        .collect();
    assert_eq!(superseded.len(), 1, "{runs:?}");
    assert!(uids.iter().any(|uid| superseded[0]["uid"] == uid.as_str()));

    // On the laptop, the pull request's run at a merge commit it never
    // fetched is the run of its branch, by the remote's ref or by name.
    for selector in ["origin/lr-tune", "lr-tune"] {
        let shown = json(&laptop.pipe(&["show", selector, "--json"]));
        assert_eq!(shown["uid"], pr_uid.as_str(), "{selector}");
        assert_eq!(shown["head_commit"], lr_head.as_str(), "{selector}");
    }
}
