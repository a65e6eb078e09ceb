//! `pipe status` of a large matrix: every stage is expanded, resolved,
//! keyed and looked up, in memory that grows by less than 1.5 KB a stage
//! (the figures, and the time, are in docs/performance.md). Memory is
//! measured, not time: the peak RSS of each `pipe` process, from the
//! kernel's accounting of that child alone.

use std::fs::File;
use std::process::Stdio;

use pipe_test_support::TestProject;

/// One matrix stage of `10^axes` expansions.
fn sweep(axes: usize) -> String {
    let keys: Vec<String> = (0..axes).map(|index| format!("k{index}")).collect();
    let matrix: Vec<String> = keys
        .iter()
        .map(|key| format!("{key}: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"))
        .collect();
    let refs: String = keys
        .iter()
        .map(|key| format!("${{matrix.{key}}}-"))
        .collect();
    format!(
        "stages:\n  sweep:\n    matrix: {{ {} }}\n    run: echo {refs} > ${{outs.out}}\n    outs: {{ out: \"out/sweep/{refs}.txt\" }}\n",
        matrix.join(", ")
    )
}

/// Runs `pipe status` and returns its last line and its peak RSS in bytes.
fn status_peak_rss(project: &TestProject) -> (String, u64) {
    let out = File::create(project.path("status.txt")).expect("status.txt");
    // Reaped by wait4 below, which also reports what it used.
    #[allow(clippy::zombie_processes)]
    let child = project
        .std_command()
        .arg("status")
        .stdout(Stdio::from(out))
        .stderr(Stdio::null())
        .spawn()
        .expect("start pipe");
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 reaps exactly this child,
    // which `Child` never waits for here.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "pipe status: wait status {status}"
    );
    let text = project.read("status.txt");
    let last = text.lines().last().unwrap_or_default().to_string();
    // Linux reports ru_maxrss in KiB.
    (last, usage.ru_maxrss as u64 * 1024)
}

#[test]
fn status_of_a_100k_stage_matrix_costs_less_than_1_5_kb_a_stage() {
    let small = TestProject::new();
    small.write("pipe.yaml", &sweep(3));
    let (small_last, small_peak) = status_peak_rss(&small);
    assert_eq!(small_last, "1000 stages: 0 fresh, 0 restorable, 1000 stale");

    let large = TestProject::new();
    large.write("pipe.yaml", &sweep(5));
    let (large_last, large_peak) = status_peak_rss(&large);
    assert_eq!(
        large_last,
        "100000 stages: 0 fresh, 0 restorable, 100000 stale"
    );
    let per_stage = large_peak.saturating_sub(small_peak) / 99_000;
    assert!(
        per_stage < 1536,
        "{per_stage} bytes of peak RSS per stage (1,000 stages: {small_peak} bytes, 100,000: {large_peak} bytes)"
    );
}
