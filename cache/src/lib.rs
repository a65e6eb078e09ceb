//! Content-addressed storage for pipe: blake3 objects and Merkle trees,
//! an action cache (stage key -> result), a stat cache that avoids
//! rehashing unchanged files, link strategies for restoring outputs,
//! verification and garbage collection.
//!
//! The on-disk layout (see docs/cache-format.md) is the same in a project's
//! `.pipe/cache`, a shared `PIPE_CACHE_DIR`, or a remote.

mod action;
mod action_lookup;
mod artifact;
mod digest;
mod error;
mod fsutil;
mod hash;
pub mod remote;
mod staging;
mod stat;
mod store;
mod tree;
pub mod untrusted;

pub use action::{manifest_of, ActionResult};
pub use action_lookup::ActionLookup;
pub use artifact::{Artifact, ArtifactKind};
pub use digest::{ActionKey, BadDigest, Digest, ObjectDigest};
pub use error::{CacheError, RemoteError, Result};
pub use staging::RestoreSites;
pub use stat::StatCache;
pub use store::{
    Cache, CorruptObject, GcReport, IncomingObject, LinkMode, VerifyReport, LAYOUT_VERSION,
};
pub use tree::MAX_TREE_DEPTH;
