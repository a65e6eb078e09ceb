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

use crate::runs::RunId;
use pipe_cache::untrusted;
use serde::{Deserialize, Serialize};

/// Under the project's `.pipe/`.
const MARKERS_DIR: &str = "running";

/// A stage being run, as its marker says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningStage {
    pub run: RunId,
    /// The `pipe run` process.
    pub pid: u32,
    pub pipeline: String,
    pub stage: String,
    /// The `pipe run` process's start time (clock ticks after boot): a
    /// killed run's pid given to another process later is not that run.
    #[serde(default)]
    pub started: Option<u64>,
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
        run: RunId,
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
            started: crate::groups::start_time_of_self(),
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
        let Some(marker) = marker else { continue };
        if marker.pipeline == pipeline && is_alive(&marker) {
            running.insert(marker.stage.clone(), marker);
        }
    }
    running
}

/// Removes the markers that dead runs left, and any file there that is
/// not a whole marker (markers are renamed into place whole, so such a
/// file is damage). Only the run lock's holder may: no other run is
/// starting stages meanwhile.
pub fn remove_dead(state_dir: &Path) {
    for (path, marker) in markers(state_dir) {
        if marker.as_ref().is_none_or(|marker| !is_alive(marker)) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Every marker file, with what it says when it reads as a marker. A
/// staged `.NAME.tmp` is left out.
fn markers(state_dir: &Path) -> Vec<(PathBuf, Option<RunningStage>)> {
    let Ok(entries) = std::fs::read_dir(state_dir.join(MARKERS_DIR)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
        .map(|entry| {
            // Read as anything under `.pipe/` is: no link, no FIFO, small.
            let marker = untrusted::read(&entry.path(), untrusted::STATE_FILE)
                .ok()
                .and_then(|text| serde_json::from_slice::<RunningStage>(&text).ok());
            (entry.path(), marker)
        })
        .collect()
}

/// A marker is believed while the `pipe` that wrote it runs: the same
/// pid, started at the same time (a killed run's pid may belong to
/// another process by now), and not a zombie (a killed `pipe` whose
/// parent has not reaped it runs nothing).
fn is_alive(marker: &RunningStage) -> bool {
    crate::groups::is_running_process(marker.pid, marker.started)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(state_dir: &Path, name: &str, marker: &RunningStage) {
        let dir = state_dir.join(MARKERS_DIR);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), serde_json::to_vec(marker).unwrap()).unwrap();
    }

    #[test]
    fn a_marker_is_believed_only_for_the_process_that_wrote_it() {
        let state = tempfile::tempdir().unwrap();
        let marker = Marker::create(state.path(), RunId(7), "p", "train", 0).unwrap();
        let running = running_stages(state.path(), "p");
        assert_eq!(running["train"].run, RunId(7));
        assert!(running_stages(state.path(), "other").is_empty());
        drop(marker);
        assert!(running_stages(state.path(), "p").is_empty());

        // This process's pid, as a killed run's pid reused: another start time.
        let own = crate::groups::start_time_of_self().unwrap();
        let reused = RunningStage {
            run: RunId(3),
            pid: std::process::id(),
            pipeline: "p".into(),
            stage: "evaluate".into(),
            started: Some(own + 1),
        };
        write(state.path(), "1-0", &reused);
        assert!(running_stages(state.path(), "p").is_empty());
        std::fs::write(state.path().join(MARKERS_DIR).join("1-1"), b"{\"run\":").unwrap();
        assert!(running_stages(state.path(), "p").is_empty());
        remove_dead(state.path());
        let left: Vec<_> = std::fs::read_dir(state.path().join(MARKERS_DIR))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
