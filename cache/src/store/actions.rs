//! Action results: a stage's outputs filed under its key.

use std::io;
use std::path::{Path, PathBuf};

use super::cache_dir::{list_sharded, Cache};
use super::objects::OnCorrupt;
use crate::action::{self, ActionResult};
use crate::untrusted;
use crate::{ActionKey, Result};

impl Cache {
    pub fn put_action(&self, result: &ActionResult) -> Result<()> {
        self.write_atomic(
            &self.action_path(&result.key),
            &action::encode(result),
            0o644,
        )
    }

    pub(super) fn read_action_file(
        path: &Path,
        key: &ActionKey,
    ) -> std::result::Result<ActionResult, String> {
        let bytes =
            untrusted::read(path, untrusted::ACTION_FILE).map_err(|error| error.to_string())?;
        action::decode(&bytes, key).map_err(|bad| bad.to_string())
    }

    /// `None` when absent, unreadable, damaged, not its key's, naming a
    /// path its manifest does not declare, or when an object it names is
    /// gone (see `action::decode`).
    pub fn get_action(&self, key: &ActionKey) -> Option<ActionResult> {
        let path = self.action_path(key);
        let bytes = match untrusted::read(&path, untrusted::ACTION_FILE) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return None,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read action result; treating it as a miss");
                return None;
            }
        };
        let result = match action::decode(&bytes, key) {
            Ok(result) => result,
            Err(reason) => {
                tracing::warn!(
                    "cached result {} ({}) cannot be used: {reason}; treating it as a miss",
                    key.short(),
                    path.display()
                );
                return None;
            }
        };
        for (output, artifact) in &result.outputs {
            if let Err(reason) = self.check_present(artifact, OnCorrupt::Discard) {
                tracing::debug!(key = %key.short(), output = output.as_str(), reason, "action result names a missing object");
                return None;
            }
        }
        Some(result)
    }

    /// Every `actions/ab/cdef….json` file, with the key its name spells.
    pub(super) fn list_actions(&self) -> Result<Vec<(PathBuf, Option<ActionKey>)>> {
        list_sharded(&self.actions_dir, ".json")
    }
}
