//! `hf/download@1`: files of a Hugging Face model repo at a pinned
//! revision, from the local HF cache when it has them, else from the hub
//! (or the mirror in `HF_ENDPOINT`). The user's cache is only read.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};

use pipe_protocol::format::{format_bytes, format_seconds};
use pipe_protocol::{excerpt, ParamSpec};

use crate::http::{self, Algorithm, FetchError, Fetcher, SizeLimit, UrlFailure};
use crate::params::unset_is_empty;
use crate::{
    BuiltinStage, OutputKind, ParamKind, Result, StageContext, StageError, StageInfo,
    StageInfoBuilder,
};

pub struct HfDownload;

const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
const RETRIES: u32 = 5;
const TIMEOUT: Duration = Duration::from_secs(60);
/// The most one file may hold, when the hub does not announce its size
/// (`X-Linked-Size`, for LFS files): 64 GiB, above the hub's own 50 GB per
/// file, so that an endless body from a mirror ends.
const MAX_FILE_BYTES: u64 = 64 << 30;
const FILE_LIMIT: SizeLimit = SizeLimit {
    expected: None,
    expected_by: "the hub",
    max: MAX_FILE_BYTES,
    max_param: None,
};

/// The stage's params, one field per `ParamSpec` of its `info()`.
#[derive(Deserialize)]
struct HfParams {
    repo: String,
    revision: String,
    #[serde(deserialize_with = "unset_is_empty")]
    files: Vec<String>,
    endpoint: Option<String>,
    cache_dir: Option<String>,
}

impl BuiltinStage for HfDownload {
    fn info(&self) -> StageInfo {
        StageInfoBuilder::new(
            "hf/download",
            1,
            "Fetches model files from a Hugging Face hub repo at a pinned revision, from the local HF cache when it has them",
        )
        .params([
            ParamSpec::new("repo", ParamKind::String, None, "the model repo: `distilbert-base-uncased` or `org/name`"),
            ParamSpec::new("revision", ParamKind::String, None, "a commit sha (40 hex digits; pins the content, so the cache key means something) or a tag/branch"),
            ParamSpec::new(
                "files",
                ParamKind::StringList,
                Some(json!(["config.json", "tokenizer.json", "model.safetensors"])),
                "files of the repo to fetch, paths relative to its root",
            ),
            ParamSpec::new("endpoint", ParamKind::String, Some(Value::Null), "the hub to download from; default: $HF_ENDPOINT, else the Hugging Face hub"),
            ParamSpec::new("cache_dir", ParamKind::String, Some(Value::Null), "a Hugging Face hub cache to read first; default: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub"),
        ])
        .output("model", OutputKind::Dir, "a directory with the requested files, at their paths in the repo")
        .metrics(["files", "files_from_cache", "bytes", "bytes_downloaded", "seconds"])
        .makes_data()
        .build()
    }

    fn run(&self, context: &StageContext) -> Result<()> {
        let started = Instant::now();
        let params: HfParams = context.params()?;
        let repo = check_repo(&params.repo)?;
        let revision = check_revision(&params.revision)?;
        let files = check_files(params.files)?;
        let endpoint = endpoint(params.endpoint.as_deref())?;
        let cache_dir = match params.cache_dir {
            Some(dir) => Some(PathBuf::from(dir)),
            None => default_cache_dir(),
        };
        let pinned = http::is_hex(&revision, 40);
        if !pinned {
            context.message(format!(
                "revision `{revision}` is a branch or tag: it can move while the cache key stays the same; pin a commit sha"
            ));
        }
        let snapshot = cache_dir
            .as_deref()
            .and_then(|dir| cached_snapshot(dir, &repo, &revision));

        let model = context.output("model");
        std::fs::create_dir_all(&model).map_err(|e| StageError::io(&model, e))?;
        let scratch = context.scratch_dir();
        std::fs::create_dir_all(scratch).map_err(|e| StageError::io(scratch, e))?;
        let auth: Vec<(String, String)> = token()
            .map(|t| ("Authorization".to_string(), format!("Bearer {t}")))
            .into_iter()
            .collect();

        let mut totals = Totals::default();
        let mut told_commit = false;
        for (index, file) in files.iter().enumerate() {
            let part = scratch.join(format!("{index}.part"));
            let target = model.join(file);
            if let Some(cached) = snapshot
                .as_ref()
                .map(|dir| dir.join(file))
                .filter(|path| path.is_file())
            {
                if copy_from_cache(context, &cached, &part, file)? {
                    totals.bytes += std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
                    totals.from_cache += 1;
                    http::move_into_place(&part, &target)?;
                    continue;
                }
            }
            let url = format!(
                "{endpoint}/{repo}/resolve/{}/{}",
                http::percent_encode(&revision, false),
                http::percent_encode(file, true)
            );
            let fetcher = Fetcher::new(context, RETRIES, TIMEOUT, format!("download {file}"));
            let fetched = match fetcher.fetch(&url, &part, Algorithm::Sha256, &auth, FILE_LIMIT) {
                Ok(fetched) => fetched,
                Err(FetchError::Stage(error)) => return Err(error),
                Err(FetchError::Url(failure)) => {
                    return Err(unavailable(
                        &repo,
                        &revision,
                        file,
                        &failure,
                        cache_dir.as_deref(),
                    ))
                }
            };
            match &fetched.announced_sha256 {
                Some(expected) if *expected != fetched.digest_hex => {
                    let _ = std::fs::remove_file(&part);
                    return Err(StageError::Checksum {
                        what: url,
                        algorithm: "sha256".into(),
                        expected: expected.clone(),
                        actual: fetched.digest_hex,
                        hint: "the bytes do not match the sha256 the hub announced (ETag): the transfer or a proxy \
                               corrupted them, or the mirror serves another file; run again, or set HF_ENDPOINT to \
                               another mirror"
                            .into(),
                    });
                }
                Some(_) => {}
                None => context.message(format!(
                    "{file}: the hub sent no sha256 (only large LFS files have one), so it is not verified"
                )),
            }
            if let (false, false, Some(commit)) = (pinned, told_commit, &fetched.repo_commit) {
                context.message(format!(
                    "revision `{revision}` is commit {commit} now: `revision: {commit}` pins it"
                ));
                told_commit = true;
            }
            totals.bytes += fetched.bytes;
            totals.downloaded += fetched.bytes;
            http::move_into_place(&part, &target)?;
        }

        let seconds = started.elapsed().as_secs_f64();
        context.message(format!(
            "{repo}@{revision}: {} files ({} from the local cache), {} downloaded in {}",
            files.len(),
            totals.from_cache,
            format_bytes(totals.downloaded as f64),
            format_seconds(seconds)
        ));
        context.write_metrics(&json!({
            "files": files.len(),
            "files_from_cache": totals.from_cache,
            "bytes": totals.bytes,
            "bytes_downloaded": totals.downloaded,
            "seconds": seconds,
        }))
    }
}

#[derive(Default)]
struct Totals {
    bytes: u64,
    downloaded: u64,
    from_cache: usize,
}

fn check_repo(repo: &str) -> Result<String> {
    let repo = repo.trim().trim_matches('/');
    let segment_ok = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    let segments: Vec<&str> = repo.split('/').collect();
    if segments.len() > 2 || !segments.iter().all(|s| segment_ok(s)) {
        return Err(StageError::param(
            "repo",
            format!("`{}` is not a hub repo name", excerpt(repo)),
            "write `name` or `org/name`, e.g. `distilbert-base-uncased` or `google-bert/bert-base-uncased`",
        ));
    }
    Ok(repo.to_string())
}

fn check_revision(revision: &str) -> Result<String> {
    let revision = revision.trim();
    if revision.is_empty()
        || revision.starts_with('/')
        || revision
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..")
        || revision.chars().any(|c| c.is_whitespace() || c == '\\')
    {
        return Err(StageError::param(
            "revision",
            format!("`{}` is not a revision", excerpt(revision)),
            "give the commit sha of the repo (40 hex digits, shown in the hub's history) or a tag",
        ));
    }
    Ok(revision.to_string())
}

fn check_files(files: Vec<String>) -> Result<Vec<String>> {
    if files.is_empty() {
        return Err(StageError::param(
            "files",
            "is empty",
            "list the files to fetch, e.g. `[config.json, model.safetensors]`",
        ));
    }
    let mut seen = BTreeSet::new();
    for file in &files {
        let bad = file.is_empty()
            || file.starts_with('/')
            || file.contains('\\')
            || file
                .split('/')
                .any(|part| part.is_empty() || part == "." || part == "..");
        if bad {
            return Err(StageError::param(
                "files",
                format!("`{}` is not a path inside the repo", excerpt(file)),
                "use paths relative to the repo root, such as `config.json` or `onnx/model.onnx`",
            ));
        }
        if !seen.insert(file.as_str()) {
            return Err(StageError::param(
                "files",
                format!("`{}` is listed twice", excerpt(file)),
                "list each file once",
            ));
        }
    }
    Ok(files)
}

fn endpoint(param: Option<&str>) -> Result<String> {
    let (endpoint, from) = match param {
        Some(endpoint) => (endpoint.to_string(), "param `endpoint`"),
        None => match std::env::var("HF_ENDPOINT")
            .ok()
            .filter(|v| !v.trim().is_empty())
        {
            Some(endpoint) => (endpoint, "HF_ENDPOINT"),
            None => (DEFAULT_ENDPOINT.to_string(), "default"),
        },
    };
    let endpoint = endpoint.trim().trim_end_matches('/').to_string();
    let lower = endpoint.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err(StageError::param(
            "endpoint",
            format!("`{endpoint}` (from {from}) is not an http:// or https:// URL"),
            "give the hub or mirror's base URL, e.g. `https://hf-mirror.example.org`",
        ));
    }
    Ok(endpoint)
}

fn default_cache_dir() -> Option<PathBuf> {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|home| home.join("hub")))
        .or_else(|| var("XDG_CACHE_HOME").map(|cache| cache.join("huggingface").join("hub")))
        .or_else(|| var("HOME").map(|home| home.join(".cache").join("huggingface").join("hub")))
}

fn token() -> Option<String> {
    ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"]
        .iter()
        .find_map(|name| {
            std::env::var(name)
                .ok()
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
        })
}

/// The snapshot directory of `repo` at `revision` in a hub cache
/// (`models--org--name/snapshots/SHA`), through `refs/REVISION` for
/// branches and tags.
fn cached_snapshot(cache_dir: &Path, repo: &str, revision: &str) -> Option<PathBuf> {
    let repo_dir = cache_dir.join(format!("models--{}", repo.replace('/', "--")));
    let direct = repo_dir.join("snapshots").join(revision);
    if direct.is_dir() {
        return Some(direct);
    }
    let commit = std::fs::read_to_string(repo_dir.join("refs").join(revision)).ok()?;
    let commit = commit.trim();
    if commit.is_empty() || commit.contains(['/', '\\']) || commit == ".." {
        return None;
    }
    let snapshot = repo_dir.join("snapshots").join(commit);
    snapshot.is_dir().then_some(snapshot)
}

/// Copies a cached file to `part`. In the hub cache, snapshot files link to
/// `blobs/ETAG`, so a 64-hex blob name is the sha256 to check. Returns false
/// when the cached copy is corrupt (it is then downloaded instead).
fn copy_from_cache(context: &StageContext, cached: &Path, part: &Path, file: &str) -> Result<bool> {
    let blob = std::fs::canonicalize(cached).unwrap_or_else(|_| cached.to_path_buf());
    let expected = blob
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| http::is_hex(n, 64))
        .map(str::to_ascii_lowercase);
    let (_, actual) = http::copy_hashing(
        context,
        &format!("copy {file}"),
        cached,
        part,
        Algorithm::Sha256,
        FILE_LIMIT,
    )?;
    if let Some(expected) = expected {
        if expected != actual {
            context.message(format!(
                "{file}: the cached copy {} has sha256 {actual}, not {expected}; downloading it instead",
                blob.display()
            ));
            let _ = std::fs::remove_file(part);
            return Ok(false);
        }
    }
    context.message(format!("{file}: from the local cache {}", cached.display()));
    Ok(true)
}

fn unavailable(
    repo: &str,
    revision: &str,
    file: &str,
    failure: &UrlFailure,
    cache_dir: Option<&Path>,
) -> StageError {
    let repo_dir = format!("models--{}", repo.replace('/', "--"));
    let layout = if http::is_hex(revision, 40) {
        format!("{repo_dir}/snapshots/{revision}/{file}")
    } else {
        format!(
            "{repo_dir}/snapshots/COMMIT/{file} (and {repo_dir}/refs/{revision} holding COMMIT)"
        )
    };
    let cache = match cache_dir {
        Some(dir) => format!("{} has no {layout}", dir.display()),
        None => "no local HF cache (neither HF_HOME nor HOME is set)".to_string(),
    };
    let message = format!(
        "cannot fetch `{file}` of `{repo}` at revision `{revision}`: {cache}, and {} failed: {}",
        failure.url, failure.reason
    );
    let fixes = format!(
        "set HF_ENDPOINT (or `endpoint:`) to a hub mirror you can reach, pre-populate the cache under HF_HOME \
         (or `cache_dir:`) with {layout}, or fetch the file with `data/download` from a URL or file:// copy"
    );
    let hint = if failure.connection {
        format!("the hub is unreachable (offline?): {fixes}")
    } else if failure.reason.starts_with("HTTP 401") || failure.reason.starts_with("HTTP 403") {
        format!(
            "the repo is private or gated: set HF_TOKEN to a token that may read it; or {fixes}"
        )
    } else if failure.reason.starts_with("HTTP 404") {
        format!("the repo, the revision or the file does not exist there: check `repo`, `revision` and `files`; or {fixes}")
    } else {
        fixes
    };
    StageError::Network {
        url: failure.url.clone(),
        message,
        hint,
    }
}
