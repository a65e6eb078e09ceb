//! Where `pipe-stage-train` finds libtorch at run time.
//!
//! A checkout's or a `cargo install`'s training worker was linked against
//! a libtorch whose directory its build recorded (rpath): nothing to do.
//! The Python wheel (`pipe-ml`, scripts/build-wheel.sh) carries the worker
//! without a recorded path, because libtorch there is the `torch` package
//! of the environment the wheel is installed into, at a path that depends
//! on that environment and its Python version. pipe finds it and puts its
//! `torch/lib` first on the worker's library path, for that worker alone:
//! a `run:` stage's own Python must keep loading its own torch.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The PyTorch release the training worker is built against: its
/// libraries are not interchangeable with another release's.
pub const TORCH_VERSION: &str = "2.11.0";

/// The wheel's distribution name (`pip install pipe-ml`); its extra
/// `train` adds `torch==TORCH_VERSION`.
pub const WHEEL_NAME: &str = "pipe-ml";

/// How the training worker gets libtorch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Libtorch {
    /// Put this directory first on the worker's library path: `LIBTORCH`'s
    /// `lib/`, or the `torch/lib` of the Python environment pipe is
    /// installed in.
    At(PathBuf),
    /// The worker's build recorded where libtorch is.
    Recorded,
    /// pipe is installed from its wheel into a Python environment whose
    /// torch is missing (`found: None`) or another release.
    Missing {
        environment: PathBuf,
        found: Option<String>,
    },
}

impl Libtorch {
    /// For the training worker at `worker`.
    pub fn for_worker(worker: &Path) -> Libtorch {
        if let Some(dir) = std::env::var_os("LIBTORCH").filter(|value| !value.is_empty()) {
            return Libtorch::At(PathBuf::from(dir).join("lib"));
        }
        let Some(environment) = worker.parent().and_then(Path::parent) else {
            return Libtorch::Recorded;
        };
        let site_dirs = site_packages(environment);
        if !site_dirs.iter().any(|site| holds_wheel(site)) {
            return Libtorch::Recorded;
        }
        // The usual layout first (a listing, no process); then the
        // environment's own Python, which also sees what `.pth` files,
        // user site-packages or PYTHONPATH add.
        let torch = site_dirs
            .iter()
            .map(|site| site.join("torch"))
            .find(|torch| torch.join("lib").is_dir())
            .or_else(|| torch_from_python(worker));
        match torch {
            Some(torch) => match torch_version(&torch) {
                Some(version) if is_supported(&version) => Libtorch::At(torch.join("lib")),
                found => Libtorch::Missing {
                    environment: environment.to_path_buf(),
                    found: Some(found.unwrap_or_else(|| "of unknown version".to_string())),
                },
            },
            None => Libtorch::Missing {
                environment: environment.to_path_buf(),
                found: None,
            },
        }
    }

    /// Why the training stages cannot run, and what to install: for
    /// `Missing`.
    pub fn missing_reason(&self) -> Option<(String, String)> {
        let Libtorch::Missing { environment, found } = self else {
            return None;
        };
        let pip = environment.join("bin").join("pip");
        let reason = match found {
            None => format!(
                "needs libtorch from torch {TORCH_VERSION}, which is not installed in the Python \
                 environment `{}` that pipe is installed in",
                environment.display()
            ),
            Some(version) => format!(
                "needs libtorch from torch {TORCH_VERSION}, but the Python environment `{}` that \
                 pipe is installed in has torch {version}",
                environment.display()
            ),
        };
        let hint = format!(
            "install pipe with its training extra: `{} install '{WHEEL_NAME}[train]'` \
             (torch=={TORCH_VERSION}), or set LIBTORCH to a libtorch {TORCH_VERSION} directory \
             (docs/install.md)",
            pip.display()
        );
        Some((reason, hint))
    }
}

/// `<prefix>/lib*/python3*/{site,dist}-packages`: where pip installs into
/// a virtual environment, a conda environment, `--user` (`~/.local`) or
/// `/usr/local`, whatever the Python version.
fn site_packages(prefix: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for lib in ["lib", "lib64"] {
        let Ok(entries) = std::fs::read_dir(prefix.join(lib)) else {
            continue;
        };
        let mut pythons: Vec<PathBuf> = entries
            .flatten()
            .filter(|entry| entry.file_name().to_string_lossy().starts_with("python3"))
            .map(|entry| entry.path())
            .collect();
        pythons.sort();
        for python in pythons {
            for name in ["site-packages", "dist-packages"] {
                let site = python.join(name);
                if site.is_dir() {
                    found.push(site);
                }
            }
        }
    }
    found
}

/// Whether the wheel's metadata (`pipe_ml-VERSION.dist-info`) is in `site`.
fn holds_wheel(site: &Path) -> bool {
    let prefix = format!("{}-", WHEEL_NAME.replace('-', "_"));
    std::fs::read_dir(site).is_ok_and(|entries| {
        entries.flatten().any(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with(&prefix) && name.ends_with(".dist-info")
        })
    })
}

/// The `torch` package directory as the environment's Python finds it,
/// without importing it (tens of milliseconds, not seconds).
fn torch_from_python(worker: &Path) -> Option<PathBuf> {
    let bin = worker.parent()?;
    let python = ["python3", "python"]
        .iter()
        .map(|name| bin.join(name))
        .find(|path| path.is_file())?;
    let output = Command::new(python)
        .args([
            "-c",
            "import importlib.util as u; s = u.find_spec('torch'); \
             print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let torch = PathBuf::from(text.trim());
    (output.status.success() && !text.trim().is_empty() && torch.join("lib").is_dir())
        .then_some(torch)
}

/// `__version__` from `torch/version.py` (`2.11.0+cu130`).
fn torch_version(torch: &Path) -> Option<String> {
    let text = std::fs::read_to_string(torch.join("version.py")).ok()?;
    text.lines().find_map(|line| {
        // `__version__ = '…'`, or with a type annotation before the `=`.
        let (_, value) = line.strip_prefix("__version__")?.split_once('=')?;
        Some(
            value
                .trim()
                .trim_matches(|c| c == '\'' || c == '"')
                .to_string(),
        )
    })
}

/// The same release, whatever its local build tag (`+cpu`, `+cu130`).
fn is_supported(version: &str) -> bool {
    version.split('+').next() == Some(TORCH_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn environment(with_torch: Option<&str>) -> tempfile::TempDir {
        let prefix = tempfile::tempdir().expect("temp dir");
        let site = prefix.path().join("lib/python3.13/site-packages");
        std::fs::create_dir_all(site.join("pipe_ml-0.1.0.dist-info")).expect("dist-info");
        std::fs::create_dir_all(prefix.path().join("bin")).expect("bin");
        if let Some(version) = with_torch {
            std::fs::create_dir_all(site.join("torch/lib")).expect("torch/lib");
            std::fs::write(
                site.join("torch/version.py"),
                format!("from typing import Optional\n__version__: str = '{version}'\ncuda: Optional[str] = None\n"),
            )
            .expect("version.py");
        }
        prefix
    }

    // LIBTORCH is read first; these cases hold while it is unset, as in
    // the suite (scripts/test.sh uses the venv's torch).
    fn libtorch_unset() -> bool {
        std::env::var_os("LIBTORCH").is_none_or(|value| value.is_empty())
    }

    #[test]
    fn the_torch_of_the_environment_is_found_whatever_its_python_version() {
        if !libtorch_unset() {
            return;
        }
        let prefix = environment(Some("2.11.0+cu130"));
        let worker = prefix.path().join("bin/pipe-stage-train");
        assert_eq!(
            Libtorch::for_worker(&worker),
            Libtorch::At(prefix.path().join("lib/python3.13/site-packages/torch/lib"))
        );
    }

    #[test]
    fn another_torch_release_or_none_is_missing_and_says_what_to_install() {
        if !libtorch_unset() {
            return;
        }
        let other = environment(Some("2.9.1+cpu"));
        let found = Libtorch::for_worker(&other.path().join("bin/pipe-stage-train"));
        let (reason, hint) = found.missing_reason().expect("missing");
        assert!(reason.contains("has torch 2.9.1+cpu"), "{reason}");
        assert!(hint.contains("install 'pipe-ml[train]'"), "{hint}");

        let none = environment(None);
        let found = Libtorch::for_worker(&none.path().join("bin/pipe-stage-train"));
        let (reason, _) = found.missing_reason().expect("missing");
        assert!(
            reason.contains("not installed in the Python environment"),
            "{reason}"
        );
    }

    #[test]
    fn a_worker_outside_a_wheel_install_keeps_its_recorded_path() {
        if !libtorch_unset() {
            return;
        }
        let root = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(root.path().join("bin")).expect("bin");
        let found = Libtorch::for_worker(&root.path().join("bin/pipe-stage-train"));
        assert_eq!(found, Libtorch::Recorded);
        assert_eq!(found.missing_reason(), None);
    }
}
