//! The cache directory (`cache_dir`: its layout, its paths and what every
//! part of it shares). Each concern lives in a module of its own:
//! - `objects`: storing and reading content-addressed objects and trees;
//! - `actions`: action results filed under their keys;
//! - `restore`: putting stored outputs back into the workspace;
//! - `verify`: rehashing everything and repairing what is bad;
//! - `gc`: removing what nothing keeps.

mod actions;
mod cache_dir;
mod gc;
mod objects;
mod restore;
mod verify;

#[cfg(test)]
mod depth_tests;
pub(crate) use cache_dir::{shard_and_rest, STALE_TMP_AGE};
pub use cache_dir::{Cache, LAYOUT_VERSION};
pub use gc::GcReport;
pub use objects::IncomingObject;
pub use restore::LinkMode;
pub use verify::{CorruptObject, VerifyReport};
