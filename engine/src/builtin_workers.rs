//! The workers of this repository and the stages they describe, as built
//! into pipe (`workers/data_stages.json` and `workers/training_stages.json`,
//! compiled in). A leaf: the run summary (`runs/`), the pipeline model and
//! the loader read what a built-in stage describes (its report's page, its
//! params) without `workers/`, which starts and builds the workers.

use std::sync::OnceLock;

use pipe_protocol::StageInfo;

/// A worker binary of this repository.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BuiltinWorker {
    /// `pipe-stage` (package `pipe-stages`): the data stages, no libtorch.
    Data,
    /// `pipe-stage-train` (package `pipe-train`): the training stages, on
    /// libtorch.
    Training,
}

impl BuiltinWorker {
    /// Its catalog built into pipe, under engine/src/.
    pub fn catalog_file(self) -> &'static str {
        match self {
            BuiltinWorker::Data => "data_stages.json",
            BuiltinWorker::Training => "training_stages.json",
        }
    }

    pub fn binary(self) -> &'static str {
        match self {
            BuiltinWorker::Data => "pipe-stage",
            BuiltinWorker::Training => "pipe-stage-train",
        }
    }

    pub(crate) fn package(self) -> &'static str {
        match self {
            BuiltinWorker::Data => "pipe-stages",
            BuiltinWorker::Training => "pipe-train",
        }
    }

    /// What its build reads, relative to the workspace root: its crate, the
    /// crates it depends on, and the workspace's manifest and lock file
    /// (profiles, versions).
    /// The training worker is built from the data worker's sources and its own.
    pub(crate) fn sources(self) -> impl Iterator<Item = &'static str> {
        const DATA: &[&str] = &[
            "stages/src",
            "stages/Cargo.toml",
            "protocol/src",
            "protocol/Cargo.toml",
            "report/src",
            "report/Cargo.toml",
            "shared-deps/Cargo.toml",
            "Cargo.toml",
            "Cargo.lock",
        ];
        const TRAINING_ONLY: &[&str] = &[
            "train/src",
            "train/shims",
            "train/build.rs",
            "train/Cargo.toml",
        ];
        let own: &[&str] = match self {
            BuiltinWorker::Data => &[],
            BuiltinWorker::Training => TRAINING_ONLY,
        };
        DATA.iter().chain(own).copied()
    }
}

/// The first stage whose description differs between `built_in` and
/// `described`, said in a few words; `None` when they agree.
pub fn first_difference(built_in: &[StageInfo], described: &[StageInfo]) -> Option<String> {
    for info in described {
        match built_in
            .iter()
            .find(|other| other.name == info.name && other.version == info.version)
        {
            None => return Some(format!("`{}@{}` is new", info.name, info.version)),
            Some(other) if other != info => {
                return Some(format!("`{}@{}` differs", info.name, info.version))
            }
            Some(_) => {}
        }
    }
    built_in
        .iter()
        .find(|info| {
            !described
                .iter()
                .any(|other| other.name == info.name && other.version == info.version)
        })
        .map(|info| format!("`{}@{}` is gone", info.name, info.version))
}

/// What `worker describe` answers, built into pipe: checked in, and
/// compared with the worker by `pipe stages --check` (and its test), so
/// never stale in a commit.
pub fn built_in_stages(worker: BuiltinWorker) -> Vec<StageInfo> {
    described(worker).to_vec()
}

/// The built-in descriptions, parsed once per process: the run's end and
/// `pipe show` ask them about every stage.
fn described(worker: BuiltinWorker) -> &'static [StageInfo] {
    static DATA: OnceLock<Vec<StageInfo>> = OnceLock::new();
    static TRAINING: OnceLock<Vec<StageInfo>> = OnceLock::new();
    let parsed = match worker {
        BuiltinWorker::Data => &DATA,
        BuiltinWorker::Training => &TRAINING,
    };
    parsed.get_or_init(|| {
        parse_catalog(worker, catalog_text(worker)).unwrap_or_else(|problem| panic!("{problem}"))
    })
}

fn catalog_text(worker: BuiltinWorker) -> &'static str {
    match worker {
        BuiltinWorker::Data => include_str!("workers/data_stages.json"),
        BuiltinWorker::Training => include_str!("workers/training_stages.json"),
    }
}

/// A catalog compiled into pipe as stage descriptions. It is this
/// repository's own file, which a unit test parses, so a failure is a
/// build from a commit that broke it (edited by hand, or `StageInfo`
/// changed without describing again): said with the file, where and how
/// to regenerate it, never taken for a worker that offers no stage, which
/// would turn every built-in stage into an unknown one.
fn parse_catalog(worker: BuiltinWorker, text: &str) -> Result<Vec<StageInfo>, String> {
    let file = worker.catalog_file();
    let stages: Vec<StageInfo> = serde_json::from_str(text).map_err(|error| {
        format!(
            "engine/src/workers/{file}, compiled into pipe, is not a list of stage \
             descriptions: {error}; regenerate it with `{} describe > engine/src/workers/{file}` \
             and rebuild pipe",
            worker.binary()
        )
    })?;
    if stages.is_empty() {
        return Err(format!(
            "engine/src/workers/{file}, compiled into pipe, describes no stage; regenerate it \
             with `{} describe > engine/src/workers/{file}` and rebuild pipe",
            worker.binary()
        ));
    }
    Ok(stages)
}

/// The pages a person opens among the outputs of the built-in stage
/// `uses` (`name@version`), as (output name, file): what its own
/// description says (`OutputSpec::page`), so the engine names no stage.
pub fn pages_of(uses: &str) -> Vec<(String, String)> {
    let Some((name, version)) = uses.rsplit_once('@') else {
        return Vec::new();
    };
    let Ok(version) = version.parse::<u32>() else {
        return Vec::new();
    };
    [BuiltinWorker::Data, BuiltinWorker::Training]
        .into_iter()
        .flat_map(described)
        .filter(|info| info.name == name && info.version == version)
        .flat_map(|info| &info.outputs)
        .filter_map(|output| Some((output.name.clone(), output.page.clone()?)))
        .collect()
}

/// The page of the output at `path` (an output named `name` sits at
/// `.../name`), among `pages`.
pub fn page_at(pages: &[(String, String)], path: &str) -> Option<String> {
    let directory = path.trim_end_matches('/');
    let name = directory.rsplit('/').next()?;
    pages
        .iter()
        .find(|(output, _)| output == name)
        .map(|(_, page)| format!("{directory}/{page}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_catalog_compiled_into_pipe_parses_and_describes_stages() {
        for worker in [BuiltinWorker::Data, BuiltinWorker::Training] {
            let stages = parse_catalog(worker, catalog_text(worker))
                .unwrap_or_else(|problem| panic!("{problem}"));
            let mut seen = std::collections::BTreeSet::new();
            for info in &stages {
                assert!(
                    seen.insert((&info.name, info.version)),
                    "{}: `{}@{}` twice",
                    worker.catalog_file(),
                    info.name,
                    info.version
                );
            }
        }
    }

    #[test]
    fn a_catalog_that_does_not_parse_is_an_error_naming_the_file_and_the_fix() {
        let broken = parse_catalog(BuiltinWorker::Data, "[{\"name\": ").unwrap_err();
        assert!(
            broken.starts_with("engine/src/workers/data_stages.json, compiled into pipe,"),
            "{broken}"
        );
        assert!(broken.contains("line 1 column"), "{broken}");
        assert!(
            broken.contains("`pipe-stage describe > engine/src/workers/data_stages.json`"),
            "{broken}"
        );
        let empty = parse_catalog(BuiltinWorker::Training, "[]").unwrap_err();
        assert!(empty.contains("describes no stage"), "{empty}");
        assert!(empty.contains("`pipe-stage-train describe"), "{empty}");
    }
}
