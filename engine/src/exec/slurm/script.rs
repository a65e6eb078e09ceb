//! The batch scripts: one per stage, which runs the stage's command or
//! worker exactly as the local executor would and then writes its exit
//! file; one per array, which picks the stage by the task id.

use std::fmt::Write;
use std::path::Path;

use crate::executor::SlurmSettings;
use crate::pipeline::slurm_time;
use crate::pipeline::{Resources, Stage};
use crate::runs::RunId;

pub(super) struct Task<'a> {
    pub root: &'a Path,
    pub stage: &'a Stage,
    pub run_id: RunId,
    /// The program and its arguments.
    pub argv: &'a [String],
    /// The stage's log: stdout and stderr, or stderr alone for a worker.
    pub log: &'a Path,
    /// A worker's event stream (its stdout).
    pub events: Option<&'a Path>,
    /// A worker's stderr, appended to the log by pipe afterwards.
    pub stderr: Option<&'a Path>,
    pub exit: &'a Path,
}

/// One word for bash, whatever the text holds.
pub(super) fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn quote_path(path: &Path) -> String {
    quote(&path.to_string_lossy())
}

pub(super) fn task_script(task: &Task<'_>) -> String {
    let mut script = String::from("#!/bin/bash\n");
    let _ = writeln!(
        script,
        "# pipe run {}, stage {}: written by pipe for Slurm (docs/scale-out.md)",
        task.run_id,
        task.stage.name.replace('\n', " ")
    );
    // Milliseconds since the epoch, for the queue wait pipe logs.
    let _ = writeln!(script, "started=$(date +%s%3N)");
    let _ = writeln!(script, "cd {} || exit 97", quote_path(task.root));
    let _ = writeln!(script, "export PIPE_STAGE={}", quote(&task.stage.name));
    let _ = writeln!(script, "export PIPE_RUN_ID={}", task.run_id);
    for (name, value) in &task.stage.env {
        // Credentials come through sbatch's environment, not this file.
        if !task.stage.secret_env.contains(name) {
            let _ = writeln!(script, "export {name}={}", quote(value));
        }
    }
    let mut command: Vec<String> = task.argv.iter().map(|arg| quote(arg)).collect();
    if spans_tasks(&task.stage.resources) {
        // One process per replica on every node, each a rank reading its
        // place from srun's environment (SLURM_PROCID, SLURM_NTASKS, the
        // node list); one that fails takes the step down with it.
        command.splice(
            0..0,
            ["srun".to_string(), "--kill-on-bad-exit=1".to_string()],
        );
    }
    let redirect = match (task.events, task.stderr) {
        (Some(events), Some(stderr)) => format!(">{} 2>{}", quote_path(events), quote_path(stderr)),
        _ => format!(">{} 2>&1", quote_path(task.log)),
    };
    let _ = writeln!(script, "{} </dev/null {redirect}", command.join(" "));
    let _ = writeln!(script, "code=$?");
    let exit = quote_path(task.exit);
    let exit_tmp = quote(&format!("{}.tmp", task.exit.display()));
    // Renamed into place: pipe never reads half an exit file.
    let _ = writeln!(
        script,
        "printf '%s %s %s %s\\n' \"$code\" \"${{SLURMD_NODENAME:-$(hostname -s)}}\" \"$started\" \"$(date +%s%3N)\" >{exit_tmp} && mv -f {exit_tmp} {exit}"
    );
    let _ = writeln!(script, "exit \"$code\"");
    script
}

/// The script of a job array whose task ids are stage indices.
pub(super) fn array_script(dir: &Path) -> String {
    format!(
        "#!/bin/bash\n# a job array written by pipe: task N runs stage number N's script\nexec bash {}/S\"$SLURM_ARRAY_TASK_ID\".sh\n",
        quote_path(dir)
    )
}

/// Whether the stage runs as several srun tasks (replicas per node, or
/// nodes) rather than as one process.
pub(super) fn spans_tasks(resources: &Resources) -> bool {
    resources.nodes > 1 || resources.ranks_per_node > 1
}

/// `sbatch` options for what the stage asks, and the cluster settings. A
/// stage of several ranks gets `nodes` nodes with one task per replica on
/// each, and its `cpus` (per node) shared among its tasks.
pub(super) fn resource_flags(resources: &Resources, settings: &SlurmSettings) -> Vec<String> {
    let mut flags = Vec::new();
    if spans_tasks(resources) {
        let ranks = resources.ranks_per_node.max(1);
        flags.push(format!("--nodes={}", resources.nodes.max(1)));
        flags.push(format!("--ntasks-per-node={ranks}"));
        flags.push(format!(
            "--cpus-per-task={}",
            (resources.cpus / ranks).max(1)
        ));
    } else {
        flags.push(format!("--cpus-per-task={}", resources.cpus.max(1)));
    }
    if let Some(mb) = resources.mem_mb {
        flags.push(format!("--mem={mb}M"));
    }
    if resources.gpus > 0 {
        flags.push(format!("--gres=gpu:{}", resources.gpus));
    }
    if let Some(seconds) = resources.time_s {
        flags.push(format!("--time={}", slurm_time(seconds)));
    }
    if let Some(partition) = &settings.partition {
        flags.push(format!("--partition={partition}"));
    }
    if let Some(account) = &settings.account {
        flags.push(format!("--account={account}"));
    }
    if let Some(qos) = &settings.qos {
        flags.push(format!("--qos={qos}"));
    }
    flags.extend(settings.flags.iter().cloned());
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_hostile_text() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        let output = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "printf %s {}",
                quote("a'b $(rm -rf /) `x` \"q\"\n")
            ))
            .output()
            .unwrap();
        assert_eq!(output.stdout, b"a'b $(rm -rf /) `x` \"q\"\n");
    }

    #[test]
    fn flags_follow_the_request() {
        let settings = SlurmSettings {
            partition: Some("gpu".into()),
            account: None,
            qos: Some("high".into()),
            flags: vec!["--constraint=a100".into()],
            poll: SlurmSettings::DEFAULT_POLL,
        };
        let resources = Resources {
            cpus: 4,
            gpus: 2,
            mem_mb: Some(8192),
            time_s: Some(5400),
            nodes: 1,
            ranks_per_node: 1,
        };
        assert_eq!(
            resource_flags(&resources, &settings),
            [
                "--cpus-per-task=4",
                "--mem=8192M",
                "--gres=gpu:2",
                "--time=0-01:30:00",
                "--partition=gpu",
                "--qos=high",
                "--constraint=a100"
            ]
        );
        let replicas = Resources {
            nodes: 2,
            ranks_per_node: 4,
            cpus: 16,
            gpus: 4,
            ..resources
        };
        assert_eq!(
            resource_flags(&replicas, &settings)[..4],
            [
                "--nodes=2",
                "--ntasks-per-node=4",
                "--cpus-per-task=4",
                "--mem=8192M"
            ]
        );
    }
}
