//! The remote cache's client: one `Remote` per run, its runtime started
//! on the first lookup, its pushes waited for at the end.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Semaphore;

use super::location::{self, Location, RemoteConfig};
use super::outcomes::{Presence, Pulled, RecordError, TmpSwept, TransferReport};
use super::shared::{action_path, lock, start_runtime, Failure, Shared};
use super::{busy, list, pull, push, read};

use crate::untrusted;
use crate::{ActionKey, ActionResult, Cache, CacheError, RemoteError};

/// Where run records live in the remote.
const RUNS_DIR: &str = "runs";
/// A run's name and tags, one object per change: `labels/<uid>/<ms>.json`,
/// so that a listing says which copy is the latest without reading any.
const LABELS_DIR: &str = "labels";

/// A connection to one remote cache, attached to a local cache. Cheap to
/// create: nothing touches the network until a result is looked up or
/// pushed, so a run whose results are all local pays nothing for it.
pub struct Remote {
    shared: Arc<Shared>,
    runtime: OnceLock<tokio::runtime::Runtime>,
    pending: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Remote {
    /// Checks the configuration (URL, credentials not in it) and prepares
    /// the client; errors are the user's to fix.
    pub fn new(config: &RemoteConfig, cache_root: &Path) -> Result<Remote, CacheError> {
        let location = Location::parse(&config.url)
            .map_err(|bad| CacheError::Remote(RemoteError::BadLocation(bad)))?;
        let operators = location::operators(config, &location)?;
        let cache = Cache::open(cache_root)?;
        let concurrency = config.concurrency.clamp(1, 256);
        let fs_root = match &location {
            Location::Fs(path) => Some(path.clone()),
            Location::S3 { .. } => None,
        };
        Ok(Remote {
            shared: Arc::new(Shared {
                url: config.url.clone(),
                read_only: config.read_only,
                concurrency,
                cache,
                signed: operators.main,
                signed_lister: operators.lister,
                anonymous: operators.anonymous,
                access: OnceLock::new(),
                list_prefix: operators.list_prefix,
                transfers: Semaphore::new(concurrency),
                secrets: location::secrets(),
                corrupt: Mutex::new(HashSet::new()),
                report: Mutex::new(TransferReport::default()),
                progress: config.progress.clone(),
                pushing: busy::BusyClock::default(),
                fs_root,
                tmp_swept: AtomicBool::new(false),
            }),
            runtime: OnceLock::new(),
            pending: Mutex::new(Vec::new()),
        })
    }

    pub fn url(&self) -> &str {
        &self.shared.url
    }

    /// Whether nothing is written to the remote: it is configured
    /// read-only, or this process found no credentials and reads it
    /// anonymously.
    pub fn read_only(&self) -> bool {
        self.shared.read_only || self.shared.anonymous()
    }

    /// Whether this process found no credentials and reads the remote
    /// unsigned (a public-read prefix; docs/ci.md, "Forks"); known once it
    /// has made a request.
    pub fn anonymous(&self) -> bool {
        self.shared.anonymous()
    }

    /// Why the remote was given up on in this process, if it was.
    pub fn unavailable(&self) -> Option<RemoteError> {
        lock(&self.shared.report).unavailable.clone()
    }

    /// The I/O threads, started on first use, and whether requests are
    /// signed, decided then. A failure to start them (no threads or file
    /// descriptors left) gives the remote up like a server that is down;
    /// nothing is kept, so a later call tries again.
    fn runtime(&self) -> Result<&tokio::runtime::Runtime, RemoteError> {
        let runtime = self.started_runtime()?;
        self.shared.access.get_or_init(|| self.access(runtime));
        Ok(runtime)
    }

    /// How this process reaches the remote: signed, unless it is S3 and
    /// the credentials chain finds nothing; then anonymously, said once.
    fn access(&self, runtime: &tokio::runtime::Runtime) -> location::Access {
        if self.shared.anonymous.is_none() {
            return location::Access::Signed;
        }
        let signed = self.shared.signed.clone();
        let access = runtime.block_on(async move { location::access_of(&signed).await });
        if access == location::Access::Anonymous {
            tracing::warn!(
                "remote cache {}: no credentials found (AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY, AWS_PROFILE, a web identity or instance role): \
                 reading it anonymously, which a public-read prefix allows, and writing \
                 nothing to it",
                self.shared.redacted(&self.shared.url)
            );
        }
        access
    }

    fn started_runtime(&self) -> Result<&tokio::runtime::Runtime, RemoteError> {
        if let Some(runtime) = self.runtime.get() {
            return Ok(runtime);
        }
        let started = start_runtime().map_err(|error| {
            self.shared.give_up_because(RemoteError::NoThreads {
                url: self.shared.redacted(&self.shared.url),
                detail: self.shared.redacted(&error.to_string()),
            })
        })?;
        // Another thread may have started one meanwhile; this one is then
        // dropped unused.
        Ok(self.runtime.get_or_init(|| started))
    }

    /// Looks `key` up in the remote and, on a hit, brings the result and
    /// every object it names into the local cache, each checked against
    /// its digest first.
    pub fn pull_result(&self, key: &ActionKey) -> Pulled {
        if self.unavailable().is_some() {
            return Pulled::Unavailable;
        }
        let Ok(runtime) = self.runtime() else {
            return Pulled::Unavailable;
        };
        let shared = self.shared.clone();
        let key = *key;
        let outcome = runtime.block_on(async move { pull::pull_result(&shared, &key).await });
        match outcome {
            Ok((objects, bytes)) => {
                let mut report = lock(&self.shared.report);
                report.results_pulled += 1;
                report.objects_pulled += objects;
                report.bytes_pulled += bytes;
                Pulled::Hit { objects, bytes }
            }
            Err(Failure::NotFound) => Pulled::Miss,
            Err(Failure::Corrupt(reason)) => {
                lock(&self.shared.report).corrupt_found += 1;
                Pulled::Corrupt(reason)
            }
            Err(Failure::Remote(error)) => {
                self.shared.give_up(&error);
                Pulled::Unavailable
            }
            Err(Failure::Local(error)) => Pulled::Corrupt(format!("local cache: {error}")),
        }
    }

    /// The remote's result for `key`, checked, with its metrics files'
    /// objects (only those) brought into the local cache: what a pulled
    /// run record's metrics are read from, without downloading outputs.
    /// `Ok(None)` when the remote holds no result for `key`.
    pub fn pull_metrics(&self, key: &ActionKey) -> Result<Option<ActionResult>, RemoteError> {
        if let Some(reason) = self.unavailable() {
            return Err(reason);
        }
        let runtime = self.runtime()?;
        let shared = self.shared.clone();
        let key = *key;
        match runtime.block_on(async move { pull::pull_metrics(&shared, &key).await }) {
            Ok(result) => Ok(result),
            Err(Failure::NotFound) => Ok(None),
            Err(Failure::Corrupt(what)) => Err(RemoteError::Corrupt { what }),
            Err(Failure::Remote(error)) => Err(self.shared.describe(&error)),
            Err(Failure::Local(error)) => Err(RemoteError::Local(Arc::new(error))),
        }
    }

    /// The remote's result for `key` was refused by a check above the cache
    /// (it names outputs the stage does not declare): the next push of
    /// this key replaces it instead of yielding to it.
    pub fn distrust(&self, key: &ActionKey) {
        self.shared.mark_corrupt(&action_path(key));
        lock(&self.shared.report).corrupt_found += 1;
    }

    /// Pushes `result` in the background: its objects first (those the
    /// remote lacks), then the action. `finish` waits for it.
    pub fn push_in_background(&self, result: ActionResult) {
        if self.shared.read_only {
            return;
        }
        let Ok(runtime) = self.runtime() else {
            lock(&self.shared.report).results_not_pushed += 1;
            return;
        };
        // Without credentials the run reads only, as a read-only one does;
        // its summary says so.
        if self.shared.anonymous() {
            return;
        }
        let shared = self.shared.clone();
        let handle = runtime.spawn(async move {
            push::push_and_count(&shared, &result).await;
        });
        lock(&self.pending).push(handle);
    }

    /// Pushes results now, `concurrency` objects at a time across them;
    /// returns how many of them the remote has afterwards.
    pub fn push_results(&self, results: Vec<ActionResult>) -> u64 {
        if self.shared.read_only {
            lock(&self.shared.report).results_not_pushed += results.len() as u64;
            return 0;
        }
        let Ok(runtime) = self.runtime() else {
            lock(&self.shared.report).results_not_pushed += results.len() as u64;
            return 0;
        };
        if self.shared.anonymous() {
            let mut report = lock(&self.shared.report);
            report.results_not_pushed += results.len() as u64;
            report.push_refused = Some(self.no_write_credentials());
            return 0;
        }
        let shared = self.shared.clone();
        let concurrency = self.shared.concurrency;
        runtime.block_on(async move {
            futures::stream::iter(results)
                .map(|result| {
                    let shared = shared.clone();
                    async move { push::push_and_count(&shared, &result).await }
                })
                .buffer_unordered(concurrency)
                .filter(|pushed| futures::future::ready(*pushed))
                .count()
                .await as u64
        })
    }

    /// Waits for background pushes and returns what this process moved.
    pub fn finish(&self) -> TransferReport {
        let handles: Vec<_> = lock(&self.pending).drain(..).collect();
        // Handles exist only once the runtime has started.
        if let (false, Some(runtime)) = (handles.is_empty(), self.runtime.get()) {
            runtime.block_on(async {
                for handle in handles {
                    let _ = handle.await;
                }
            });
        }
        let mut report = lock(&self.shared.report).clone();
        if let Some(pushing) = self.shared.pushing.total() {
            report.push_seconds = pushing.as_secs_f64();
        }
        report
    }

    /// What the remote has of `key`'s result, without downloading objects.
    pub fn presence(&self, key: &ActionKey) -> Result<Presence, RemoteError> {
        let runtime = self.runtime()?;
        let shared = self.shared.clone();
        let key = *key;
        let outcome = runtime.block_on(async move { pull::presence(&shared, &key).await });
        outcome.map_err(|error| self.shared.describe(&error))
    }

    /// `presence` of every key, in their order, `concurrency` of them at a
    /// time (`pipe status --remote`). The first failure of the remote ends
    /// it, described as `presence` describes it.
    pub fn presence_of_all(&self, keys: &[ActionKey]) -> Result<Vec<Presence>, RemoteError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let runtime = self.runtime()?;
        let shared = self.shared.clone();
        let keys = keys.to_vec();
        let outcome = runtime.block_on(async move { pull::presence_of_all(&shared, &keys).await });
        outcome.map_err(|error| self.shared.describe(&error))
    }

    /// Stores a run record under `runs/COMMIT/UID.json` (unconditionally:
    /// a record only grows, from running to finished).
    pub fn put_run_record(
        &self,
        commit: Option<&str>,
        uid: &str,
        json: Vec<u8>,
    ) -> Result<(), RemoteError> {
        self.writable()?;
        if json.len() as u64 > untrusted::RUN_RECORD.bytes {
            return Err(RemoteError::RecordTooLarge {
                bytes: json.len(),
                limit: untrusted::human(untrusted::RUN_RECORD.bytes),
            });
        }
        self.put_small(run_record_path(commit, uid), json)
    }

    /// Stores the labels of run `uid` as they were at `labels_ms`.
    pub fn put_run_labels(
        &self,
        uid: &str,
        labels_ms: u64,
        json: Vec<u8>,
    ) -> Result<(), RemoteError> {
        self.writable()?;
        self.put_small(
            format!("{LABELS_DIR}/{}/{labels_ms}.json", safe_component(uid)),
            json,
        )
    }

    /// Whether a write may be tried: not to a read-only remote, nor one
    /// given up on.
    fn writable(&self) -> Result<(), RemoteError> {
        if self.shared.read_only {
            return Err(RemoteError::ReadOnly);
        }
        if let Some(reason) = self.unavailable() {
            return Err(reason);
        }
        self.runtime()?;
        if self.shared.anonymous() {
            return Err(self.no_write_credentials());
        }
        Ok(())
    }

    fn no_write_credentials(&self) -> RemoteError {
        RemoteError::NoWriteCredentials {
            url: self.shared.redacted(&self.shared.url),
        }
    }

    fn put_small(&self, path: String, json: Vec<u8>) -> Result<(), RemoteError> {
        self.shared.sweep_tmp_once();
        let shared = self.shared.clone();
        self.runtime()?
            .block_on(async move { shared.operator().write(&path, json).await })
            .map(|_| ())
            .map_err(|error| self.shared.give_up(&error))
    }

    /// The paths of the labels objects, every version of every run's.
    pub fn list_run_labels(&self) -> Result<Vec<String>, RemoteError> {
        self.list_json(format!("{LABELS_DIR}/"))
    }

    /// Whether the record of the run `uid` (made at `commit`, if any) is
    /// in the remote: the one place that knows where records are kept.
    pub fn has_run_record(&self, commit: Option<&str>, uid: &str) -> Result<bool, RemoteError> {
        let name = format!("/{}.json", safe_component(uid));
        Ok(self
            .list_run_records(Some(commit.unwrap_or(NO_COMMIT)))?
            .iter()
            .any(|path| path.ends_with(&name)))
    }

    /// The paths of the run records stored for `commit`, or for every
    /// commit.
    pub fn list_run_records(&self, commit: Option<&str>) -> Result<Vec<String>, RemoteError> {
        self.list_json(match commit {
            Some(commit) => format!("{RUNS_DIR}/{}/", safe_component(commit)),
            None => format!("{RUNS_DIR}/"),
        })
    }

    /// The `.json` objects under `dir`, at any depth, at most
    /// `untrusted::LISTING_ENTRIES` entries listed.
    fn list_json(&self, dir: String) -> Result<Vec<String>, RemoteError> {
        let runtime = self.runtime()?;
        let shared = self.shared.clone();
        match runtime.block_on(async move { list::list_json(&shared, &dir).await }) {
            Ok(paths) => Ok(paths),
            Err(list::Refused::Remote(error)) => Err(self.shared.give_up(&error)),
            Err(list::Refused::Listing(reason)) => Err(reason),
        }
    }

    /// The bytes of the run record at `path`, at most
    /// `untrusted::RUN_RECORD` of them.
    pub fn get_run_record(&self, path: &str) -> Result<Vec<u8>, RecordError> {
        let shared = self.shared.clone();
        let owned = path.to_string();
        let runtime = self.runtime().map_err(RecordError::Unavailable)?;
        let read = runtime.block_on(async move {
            read::read_capped(&shared, &owned, untrusted::RUN_RECORD).await
        });
        match read {
            Ok(bytes) => Ok(bytes),
            Err(Failure::Corrupt(what)) => Err(RecordError::Refused(RemoteError::Corrupt { what })),
            Err(Failure::NotFound) => Err(RecordError::Refused(RemoteError::Vanished {
                path: path.to_string(),
            })),
            Err(Failure::Remote(error)) => {
                Err(RecordError::Unavailable(self.shared.give_up(&error)))
            }
            Err(Failure::Local(error)) => Err(RecordError::Unavailable(RemoteError::Local(
                Arc::new(error),
            ))),
        }
    }

    /// Removes what killed pushes left in a `file://` remote's `tmp/`:
    /// entries older than any push takes (`STALE_TMP_AGE`). `None` for a
    /// remote without one (S3 keeps its lifecycle rule) or a read-only one.
    pub fn remove_stale_temporaries(&self) -> Result<Option<TmpSwept>, CacheError> {
        self.shared.tmp_swept.store(true, Ordering::Relaxed);
        self.shared.remove_stale_temporaries()
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        // Pushes still running when a caller forgot `finish` would be cut
        // off mid-upload; the conditional put makes that harmless, but wait.
        if !lock(&self.pending).is_empty() {
            self.finish();
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// Where the records of runs made outside a git repository are kept.
const NO_COMMIT: &str = "no-commit";

fn run_record_path(commit: Option<&str>, uid: &str) -> String {
    format!(
        "{RUNS_DIR}/{}/{}.json",
        safe_component(commit.unwrap_or(NO_COMMIT)),
        safe_component(uid)
    )
}

/// A path component made of what a commit id or uid may hold.
fn safe_component(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
