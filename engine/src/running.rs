//! Which stages a `pipe run` is running now, readable by another process
//! (`pipe status`, `pipe why`) without the run lock.
//!
//! While a stage's command or worker runs (locally or as a Slurm job),
//! `.pipe/running/PIPEPID-INDEX` names its run, its pipeline and the pid of
//! the `pipe` running it; the file goes when the stage ends. A `pipe` that
//! is killed leaves its files behind: a reader believes one only while its
//! pid is alive, and the next holder of the run lock removes them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Under the project's `.pipe/`.
const MARKERS_DIR: &str = "running";

/// A stage being run, as its marker says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningStage {
    pub run: i64,
    /// The `pipe run` process.
    pub pid: u32,
    pub pipeline: String,
    pub stage: String,
}

/// The marker of one running stage; removed when dropped.
pub struct Marker {
    path: PathBuf,
}

impl Marker {
    /// Marks stage `stage` (number `index` of this process's pipeline) as
    /// running in run `run`. Best effort: without its marker a stage still
    /// runs, and `status` only knows less about it.
    pub fn create(
        state_dir: &Path,
        run: i64,
        pipeline: &str,
        stage: &str,
        index: usize,
    ) -> Option<Marker> {
        let pid = std::process::id();
        let dir = state_dir.join(MARKERS_DIR);
        let path = dir.join(format!("{pid}-{index}"));
        let staged = dir.join(format!(".{pid}-{index}.tmp"));
        let text = serde_json::to_vec(&RunningStage {
            run,
            pid,
            pipeline: pipeline.to_string(),
            stage: stage.to_string(),
        })
        .ok()?;
        // Renamed into place: a reader sees a whole marker or none.
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&staged, text))
            .and_then(|()| std::fs::rename(&staged, &path));
        match written {
            Ok(()) => Some(Marker { path }),
            Err(error) => {
                tracing::debug!("cannot mark stage `{stage}` as running: {error}");
                let _ = std::fs::remove_file(&staged);
                None
            }
        }
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The stages of `pipeline` that a live `pipe run` is running now, by name.
pub fn running_stages(state_dir: &Path, pipeline: &str) -> HashMap<String, RunningStage> {
    let mut running = HashMap::new();
    for (_, marker) in markers(state_dir) {
        if marker.pipeline == pipeline && process_alive(marker.pid) {
            running.insert(marker.stage.clone(), marker);
        }
    }
    running
}

/// Removes the markers that dead runs left. Only the run lock's holder
/// may: no other run is starting stages meanwhile.
pub fn remove_dead(state_dir: &Path) {
    for (path, marker) in markers(state_dir) {
        if !process_alive(marker.pid) {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn markers(state_dir: &Path) -> Vec<(PathBuf, RunningStage)> {
    let Ok(entries) = std::fs::read_dir(state_dir.join(MARKERS_DIR)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|entry| {
            let text = std::fs::read(entry.path()).ok()?;
            let marker = serde_json::from_slice::<RunningStage>(&text).ok()?;
            Some((entry.path(), marker))
        })
        .collect()
}

/// A killed `pipe` whose parent has not reaped it yet is a zombie: it
/// runs nothing.
fn process_alive(pid: u32) -> bool {
    if !crate::runs::process_alive(i64::from(pid)) {
        return false;
    }
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // The state follows the command name, which ends at the last `)`.
    let state = stat
        .iter()
        .rposition(|&byte| byte == b')')
        .and_then(|close| stat.get(close + 2));
    state != Some(&b'Z')
}
