//! The files a conversion reads (`dvc.yaml`, `params.yaml`, vars files),
//! each parsed by pipe's YAML layer into spanned nodes, so that every
//! finding and error points into its file.

use std::path::{Path, PathBuf};

use crate::project_files::source::{FileId, Sources, Span};
use crate::project_files::yaml::{self, Node};
use crate::{Diagnostic, EngineError};

/// Why a conversion stops: a located problem in a file (one DVC would
/// refuse too), or an error of its own (I/O, YAML syntax).
#[derive(Debug)]
pub(crate) enum Stop {
    At(Span, String),
    Engine(EngineError),
}

impl From<(Span, String)> for Stop {
    fn from((span, message): (Span, String)) -> Self {
        Stop::At(span, message)
    }
}

impl From<EngineError> for Stop {
    fn from(error: EngineError) -> Self {
        Stop::Engine(error)
    }
}

impl Stop {
    /// The error to return, located through `sources`.
    pub(crate) fn into_error(self, sources: &Sources) -> EngineError {
        match self {
            Stop::Engine(error) => error,
            Stop::At(span, message) => EngineError::Spec(vec![Diagnostic::new("bad-dvc-yaml", message)
                .at(sources.location(span))
                .with_hint("fix it in dvc.yaml, then run `pipe init --from-dvc` again (docs/coming-from-dvc.md)")]),
        }
    }
}

/// Reads the project's files into one set of sources.
pub(crate) struct Reader {
    pub(crate) sources: Sources,
    dir: PathBuf,
    last: Option<FileId>,
}

impl Reader {
    pub(crate) fn new(dir: &Path) -> Reader {
        Reader {
            sources: Sources::default(),
            dir: dir.to_path_buf(),
            last: None,
        }
    }

    /// The document of `relative` (to the project directory), `None` when
    /// there is no such file or it holds nothing; its YAML errors located
    /// in it.
    pub(crate) fn read_yaml(&mut self, relative: &Path) -> Result<Option<Node>, Stop> {
        let path = self.dir.join(relative);
        if !path.is_file() {
            return Ok(None);
        }
        let text = crate::pipefile::read_source(&path)?;
        let file = self.sources.add(Some(path), text);
        self.last = Some(file);
        let node = yaml::parse(&self.sources, file).map_err(EngineError::Spec)?;
        Ok(node.filter(|node| !node.is_null()))
    }

    /// The span of the first character of the file read last, for a
    /// problem with the file as a whole.
    pub(crate) fn start_of_last(&self) -> Option<Span> {
        self.last.map(|file| Span {
            file,
            line: 1,
            col: 1,
            len: 1,
        })
    }
}
