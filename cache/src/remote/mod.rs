//! A remote cache: the second level behind the local one, shared by CI
//! machines and laptops (docs/remote-cache.md).
//!
//! The remote holds the local layout: `objects/ab/cdef…` (immutable,
//! content-addressed) and `actions/ab/cdef….json`, plus `runs/` for run
//! records. Objects are written before the action that names them, and an
//! action is written with a conditional put (If-None-Match), so a reader
//! never sees a result whose objects are missing and two writers of one
//! key cannot clobber each other. Everything pulled is checked against its
//! digest before the local cache takes it.
//!
//! A remote that cannot be reached, or refuses access, is not an error for
//! a run: the first failure is reported once and the rest of the run goes
//! on with the local cache alone.

mod busy;
mod client;
mod list;
mod location;
mod outcomes;
mod progress;
mod pull;
mod push;
mod read;
mod shared;
mod transport;

pub use crate::error::BadLocation;
pub use client::Remote;
pub use location::{Location, RemoteConfig};
pub use outcomes::{Presence, Pulled, RecordError, TmpSwept, TransferReport};
pub use progress::{Direction, Outcome, Phase, ProgressSink, TransferEvent, PROGRESS_INTERVAL};
pub use shared::{action_path, object_path};

#[cfg(test)]
mod progress_tests;
