//! What a use case tells the user on the way, as it happens (a record
//! pulled to resolve a reference, a wait for the run lock, a note on a
//! selection): one line on stderr each, in the engine's words.

use std::fmt::Display;

/// A notice as the line it is on stderr.
pub fn line(notice: &impl Display) -> String {
    format!("{notice}\n")
}
