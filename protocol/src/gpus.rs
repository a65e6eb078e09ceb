//! The GPUs this process may use, found once for the engine (which hands
//! them out to stages with `resources.gpus`) and for the training worker
//! (which names the ones it ran on in its metrics): `nvidia-smi`'s list,
//! narrowed to an inherited `CUDA_VISIBLE_DEVICES`, in the order CUDA
//! numbers them.
//!
//! Not promised: CUDA numbers devices fastest first unless
//! `CUDA_DEVICE_ORDER=PCI_BUS_ID`, and nvidia-smi by PCI bus, so on a
//! machine mixing GPU models an index in `CUDA_VISIBLE_DEVICES` may name
//! another model than the one nvidia-smi gives that index. UUIDs are exact.

use std::fmt;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;

/// The program asked, found on `PATH`.
pub const NVIDIA_SMI: &str = "nvidia-smi";

/// How long `nvidia-smi` may take: a wedged driver can make it hang for
/// minutes, and neither a run's start nor a finished training run should
/// wait for it.
pub const NVIDIA_SMI_TIMEOUT: Duration = Duration::from_secs(5);

/// One GPU as nvidia-smi lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// How a child process's `CUDA_VISIBLE_DEVICES` names this GPU: the
    /// inherited entry that selected it (an index or a UUID, as written),
    /// else nvidia-smi's index.
    pub id: String,
    /// nvidia-smi's index (PCI bus order).
    pub index: String,
    /// `GPU-5d3c...`.
    pub uuid: String,
    /// `NVIDIA H200`.
    pub name: String,
}

/// Why no list came back: callers that can do without GPUs treat every
/// one of these as "none".
#[derive(Debug)]
pub enum GpuError {
    /// nvidia-smi could not be started (not installed: no NVIDIA driver).
    Spawn(std::io::Error),
    /// It exited with a failure (its usual way of saying the driver is not
    /// loaded).
    Failed(ExitStatus),
    /// It did not answer in time and was killed.
    TimedOut(Duration),
    /// Its output could not be read.
    Read(std::io::Error),
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::Spawn(error) => write!(f, "cannot run {NVIDIA_SMI}: {error}"),
            GpuError::Failed(status) => write!(f, "{NVIDIA_SMI} failed ({status})"),
            GpuError::TimedOut(after) => write!(
                f,
                "{NVIDIA_SMI} did not answer within {} and was stopped",
                crate::format::format_seconds(after.as_secs_f64())
            ),
            GpuError::Read(error) => write!(f, "cannot read {NVIDIA_SMI}'s output: {error}"),
        }
    }
}

impl std::error::Error for GpuError {}

/// The GPUs this process may use: [`NVIDIA_SMI`]'s, within
/// [`NVIDIA_SMI_TIMEOUT`], narrowed to `CUDA_VISIBLE_DEVICES` when it is
/// set. Entry N is what CUDA calls `cuda:N`.
pub fn visible_gpus() -> Result<Vec<Gpu>, GpuError> {
    let listing = query_nvidia_smi(Path::new(NVIDIA_SMI), NVIDIA_SMI_TIMEOUT)?;
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    Ok(narrow_to_visible(
        parse_listing(&listing),
        visible.as_deref(),
    ))
}

/// The stdout of `PROGRAM --query-gpu=index,uuid,name --format=csv,noheader`,
/// killed if it has not exited within `timeout`.
pub fn query_nvidia_smi(program: &Path, timeout: Duration) -> Result<String, GpuError> {
    use crate::child::{output_within, ChildError};
    let mut command = Command::new(program);
    command.args(["--query-gpu=index,uuid,name", "--format=csv,noheader"]);
    match output_within(&mut command, timeout) {
        Ok(finished) if finished.status.success() => {
            Ok(String::from_utf8_lossy(&finished.stdout).into_owned())
        }
        Ok(finished) => Err(GpuError::Failed(finished.status)),
        Err(ChildError::Spawn(error)) => Err(GpuError::Spawn(error)),
        Err(ChildError::TimedOut(after)) => Err(GpuError::TimedOut(after)),
        Err(ChildError::Wait(error)) => Err(GpuError::Read(error)),
    }
}

/// Lines of `nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader`:
/// `0, GPU-5d3c..., NVIDIA H100 80GB HBM3`. A line without the three
/// fields is skipped (a name may hold commas: it is the rest of the line).
pub fn parse_listing(text: &str) -> Vec<Gpu> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ',').map(str::trim);
            let (index, uuid, name) = (fields.next()?, fields.next()?, fields.next()?);
            (!index.is_empty() && !name.is_empty()).then(|| Gpu {
                id: index.to_string(),
                index: index.to_string(),
                uuid: uuid.to_string(),
                name: name.to_string(),
            })
        })
        .collect()
}

/// `gpus` as CUDA shows them under `CUDA_VISIBLE_DEVICES` = `visible`:
/// all of them when it is unset; otherwise the listed ones in its order,
/// each entry an index or a UUID (or a UUID's unambiguous prefix, as CUDA
/// accepts). As CUDA does, an entry that names no GPU hides it and every
/// entry after it, so `""` and `-1` mean none.
pub fn narrow_to_visible(gpus: Vec<Gpu>, visible: Option<&str>) -> Vec<Gpu> {
    let Some(visible) = visible else {
        return gpus;
    };
    let mut shown: Vec<Gpu> = Vec::new();
    for entry in visible.split(',').map(str::trim) {
        let matching: Vec<&Gpu> = gpus
            .iter()
            .filter(|gpu| {
                gpu.index == entry
                    || gpu.uuid == entry
                    || (entry.starts_with("GPU-") && gpu.uuid.starts_with(entry))
            })
            .collect();
        let [gpu] = matching.as_slice() else {
            break;
        };
        // One device cannot be two CUDA devices: a repeat ends the list as
        // an unknown entry does.
        if shown.iter().any(|seen| seen.index == gpu.index) {
            break;
        }
        shown.push(Gpu {
            id: entry.to_string(),
            ..(*gpu).clone()
        });
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const LISTING: &str = "0, GPU-aaa-111, NVIDIA A100\n1, GPU-bbb-222, NVIDIA H100 80GB HBM3\n\
                           2, GPU-ccc-333, NVIDIA H200, rev 2\n\ngarbage\n";

    fn ids(gpus: &[Gpu]) -> Vec<(&str, &str)> {
        gpus.iter()
            .map(|gpu| (gpu.id.as_str(), gpu.index.as_str()))
            .collect()
    }

    #[test]
    fn listing_lines_give_index_uuid_and_name() {
        let gpus = parse_listing(LISTING);
        assert_eq!(
            gpus,
            [
                Gpu {
                    id: "0".into(),
                    index: "0".into(),
                    uuid: "GPU-aaa-111".into(),
                    name: "NVIDIA A100".into()
                },
                Gpu {
                    id: "1".into(),
                    index: "1".into(),
                    uuid: "GPU-bbb-222".into(),
                    name: "NVIDIA H100 80GB HBM3".into()
                },
                Gpu {
                    id: "2".into(),
                    index: "2".into(),
                    uuid: "GPU-ccc-333".into(),
                    name: "NVIDIA H200, rev 2".into()
                },
            ]
        );
        assert!(parse_listing("").is_empty());
    }

    #[test]
    fn cuda_visible_devices_selects_and_orders_by_index_or_uuid() {
        let gpus = parse_listing(LISTING);
        assert_eq!(ids(&narrow_to_visible(gpus.clone(), None)).len(), 3);
        assert_eq!(
            ids(&narrow_to_visible(gpus.clone(), Some("2,0"))),
            [("2", "2"), ("0", "0")]
        );
        assert_eq!(
            ids(&narrow_to_visible(gpus.clone(), Some("GPU-bbb-222, 2"))),
            [("GPU-bbb-222", "1"), ("2", "2")]
        );
        // A unique prefix of a UUID, as CUDA accepts it.
        assert_eq!(
            ids(&narrow_to_visible(gpus.clone(), Some("GPU-ccc"))),
            [("GPU-ccc", "2")]
        );
    }

    /// A stand-in for nvidia-smi: a shell script `name` with `body`.
    fn fake_nvidia_smi(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn nvidia_smi_that_fails_hangs_or_is_missing_gives_a_typed_error() {
        let dir = std::env::temp_dir().join(format!("pipe-protocol-gpus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let patience = Duration::from_secs(5);
        let answers = fake_nvidia_smi(&dir, "answers", "echo '0, GPU-aaa, NVIDIA H200'");
        assert_eq!(
            query_nvidia_smi(&answers, patience).unwrap(),
            "0, GPU-aaa, NVIDIA H200\n"
        );
        let fails = fake_nvidia_smi(&dir, "fails", "echo 'NVIDIA-SMI has failed'; exit 9");
        assert!(matches!(
            query_nvidia_smi(&fails, patience),
            Err(GpuError::Failed(status)) if status.code() == Some(9)
        ));
        // Killed once its time is up rather than waited for.
        let hangs = fake_nvidia_smi(&dir, "hangs", "exec sleep 600");
        let started = Instant::now();
        assert!(matches!(
            query_nvidia_smi(&hangs, Duration::from_millis(200)),
            Err(GpuError::TimedOut(_))
        ));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(matches!(
            query_nvidia_smi(&dir.join("absent"), patience),
            Err(GpuError::Spawn(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn cuda_visible_devices_stops_at_the_first_entry_naming_no_gpu() {
        let gpus = parse_listing(LISTING);
        assert!(narrow_to_visible(gpus.clone(), Some("")).is_empty());
        assert!(narrow_to_visible(gpus.clone(), Some("-1")).is_empty());
        assert_eq!(
            ids(&narrow_to_visible(gpus.clone(), Some("1,7,0"))),
            [("1", "1")]
        );
        // `GPU-` alone is a prefix of every UUID: ambiguous, so it names none.
        assert!(narrow_to_visible(gpus.clone(), Some("GPU-")).is_empty());
        // A GPU named twice: the list ends at the repeat.
        assert_eq!(
            ids(&narrow_to_visible(gpus, Some("0,GPU-aaa-111,1"))),
            [("0", "0")]
        );
    }
}
