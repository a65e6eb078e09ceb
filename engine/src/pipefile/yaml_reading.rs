//! What pipe's YAML layer makes of a text, in terms a test outside the
//! crate can compare: the parser's events in the YAML test suite's
//! notation and the document as JSON (`engine/tests/it/yaml_suite.rs`).

use std::path::Path;

use serde_json::Value;

use crate::project_files::source::Sources;
use crate::project_files::yaml;
use crate::Diagnostic;

/// What pipe's YAML layer makes of a text: for the YAML test suite.
#[doc(hidden)]
#[derive(Debug)]
pub struct YamlReading {
    /// The parser's events, as far as it got, in the suite's notation.
    pub events: Vec<String>,
    /// The document as JSON (scalars resolved by the core schema, as pipe
    /// reads them), `None` for a stream without one, or why the layer
    /// refused the text.
    pub document: Result<Option<Value>, Vec<Diagnostic>>,
}

/// Reads `text` as the file `path` through pipe's YAML layer, as every
/// pipeline and params file is read, and says what it saw.
#[doc(hidden)]
pub fn read_yaml(path: &Path, text: String) -> YamlReading {
    let mut sources = Sources::default();
    let file = sources.add(Some(path.to_path_buf()), text);
    let (document, events) = yaml::parse_logged(&sources, file);
    YamlReading {
        events,
        document: document.map(|root| root.as_ref().map(super::params::to_json)),
    }
}
