//! The `cache:` section of a pipeline file and of the project's settings
//! file `pipe.config.yaml`: link modes and the remote cache.

use pipe_cache::LinkMode;

use crate::pipeline::RemoteSpec;
use crate::project_files::collect::Diagnostics;
use crate::project_files::source::Sources;
use crate::project_files::yaml::{Node, NodeValue, Resolved, Scalar};
use crate::suggest::{did_you_mean, hint_with_suggestion};
use crate::{Diagnostic, Location};

/// What a `cache:` section says; unset parts fall through to other sources.
#[derive(Debug, Clone, Default)]
pub(crate) struct FileSettings {
    pub link: Option<Vec<LinkMode>>,
    /// Where `link` is written.
    pub link_at: Option<Location>,
    pub remote: Option<RemoteSpec>,
    /// `executor:` of pipe.config.yaml (a pipeline's own is read by `load`).
    pub executor: Option<crate::pipeline::ExecutorSpec>,
}

const CACHE_KEYS: [&str; 2] = ["link", "remote"];
const REMOTE_KEYS: [&str; 5] = ["url", "endpoint", "region", "read_only", "concurrency"];
const REMOTE_HINT: &str = "write e.g. `remote: s3://bucket/prefix`, or `remote: { url: s3://bucket/prefix, endpoint: http://127.0.0.1:9000, read_only: true }`; `remote: off` turns it off";

pub(crate) fn parse(node: &Node, sources: &Sources, diagnostics: &mut Diagnostics) -> FileSettings {
    let mut section = FileSettings::default();
    let Some(entries) = node.as_map() else {
        diagnostics.push(
            Diagnostic::new(
                "bad-type",
                format!("`cache` must be a mapping, found {}", node.describe()),
            )
            .at(sources.location(node.span))
            .with_hint("write e.g. `cache: { link: [reflink, copy], remote: s3://bucket/prefix }`"),
        );
        return section;
    };
    for entry in entries {
        match entry.key.as_str() {
            "link" => {
                section.link = link_modes(&entry.value, sources, diagnostics);
                section.link_at = sources.location(entry.value.span);
            }
            "remote" => section.remote = remote(&entry.value, sources, diagnostics),
            other => diagnostics.push(
                Diagnostic::new("unknown-key", format!("unknown key `{other}` in `cache`"))
                    .at(sources.location(entry.key_span))
                    .with_hint(hint_with_suggestion(
                        did_you_mean(other, CACHE_KEYS),
                        format!("known keys: {}", CACHE_KEYS.join(", ")),
                    )),
            ),
        }
    }
    section
}

fn link_modes(
    node: &Node,
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) -> Option<Vec<LinkMode>> {
    let modes_hint = "write e.g. `cache: { link: [reflink, copy] }`; modes are tried in order";
    let items: Vec<&Node> = match &node.value {
        NodeValue::Seq(items) => items.iter().collect(),
        NodeValue::Scalar(Scalar { .. }) if node.as_str().is_some() => vec![node],
        _ => {
            diagnostics.push(
                Diagnostic::new(
                    "bad-type",
                    format!(
                        "`cache.link` must be a list of link modes, found {}",
                        node.describe()
                    ),
                )
                .at(sources.location(node.span))
                .with_hint(modes_hint),
            );
            return None;
        }
    };
    let mut modes = Vec::new();
    for item in items {
        match item.as_str().and_then(LinkMode::parse) {
            Some(mode) => modes.push(mode),
            None => {
                let text = item.as_scalar().map_or("", |scalar| scalar.text.as_str());
                let suggestion = did_you_mean(text, ["reflink", "hardlink", "symlink", "copy"]);
                diagnostics.push(
                    Diagnostic::new("bad-link-mode", format!("unknown link mode `{text}`"))
                        .at(sources.location(item.span))
                        .with_hint(hint_with_suggestion(
                            suggestion,
                            "link modes: reflink, hardlink, symlink, copy".to_string(),
                        )),
                );
            }
        }
    }
    if modes.is_empty() {
        diagnostics.push(
            Diagnostic::new("bad-type", "`cache.link` names no link mode")
                .at(sources.location(node.span))
                .with_hint(modes_hint),
        );
    }
    Some(modes)
}

fn remote(node: &Node, sources: &Sources, diagnostics: &mut Diagnostics) -> Option<RemoteSpec> {
    let mut spec = RemoteSpec::default();
    if let Some(url) = node.as_str() {
        spec.url = Some(checked_url(url, node, sources, diagnostics)?);
        spec.places
            .extend(sources.location(node.span).map(|at| ("url", at)));
        return Some(spec);
    }
    if node
        .as_scalar()
        .is_some_and(|scalar| scalar.resolve() == Resolved::Bool(false))
    {
        spec.url = Some("off".to_string());
        spec.places
            .extend(sources.location(node.span).map(|at| ("url", at)));
        return Some(spec);
    }
    let Some(entries) = node.as_map() else {
        diagnostics.push(
            Diagnostic::new(
                "bad-type",
                format!(
                    "`cache.remote` must be a URL or a mapping, found {}",
                    node.describe()
                ),
            )
            .at(sources.location(node.span))
            .with_hint(REMOTE_HINT),
        );
        return None;
    };
    let mut ok = true;
    for entry in entries {
        let value = &entry.value;
        if value.as_str().is_some_and(|text| text.contains('\0')) {
            diagnostics.push(crate::project_files::collect::nul_byte(
                &format!("`cache.remote.{}`", entry.key),
                sources.location(value.span),
            ));
            ok = false;
            continue;
        }
        let mut bad_type = |expected: &str| {
            diagnostics.push(
                Diagnostic::new(
                    "bad-type",
                    format!(
                        "`cache.remote.{}` must be {expected}, found {}",
                        entry.key,
                        value.describe()
                    ),
                )
                .at(sources.location(value.span))
                .with_hint(REMOTE_HINT),
            );
        };
        if let (Some(name), Some(at)) = (
            REMOTE_KEYS.iter().find(|name| **name == entry.key),
            sources.location(value.span),
        ) {
            spec.places.insert(name, at);
        }
        match entry.key.as_str() {
            "url" => match value.as_str() {
                Some(url) => match checked_url(url, value, sources, diagnostics) {
                    Some(url) => spec.url = Some(url),
                    None => ok = false,
                },
                None => {
                    bad_type("a URL");
                    ok = false;
                }
            },
            "endpoint" => match value.as_str() {
                Some(endpoint) if endpoint.contains('@') => {
                    diagnostics.push(
                        Diagnostic::new(
                            "credentials-in-remote",
                            "`cache.remote.endpoint` carries credentials",
                        )
                        .at(sources.location(value.span))
                        .with_hint("remove them: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment"),
                    );
                    ok = false;
                }
                Some(endpoint) => spec.endpoint = Some(endpoint.to_string()),
                None => {
                    bad_type("a URL such as http://127.0.0.1:9000");
                    ok = false;
                }
            },
            "region" => match value.as_str() {
                Some(region) => spec.region = Some(region.to_string()),
                None => {
                    bad_type("text such as us-east-1");
                    ok = false;
                }
            },
            "read_only" => match value.as_scalar().map(Scalar::resolve) {
                Some(Resolved::Bool(read_only)) => spec.read_only = Some(read_only),
                _ => {
                    bad_type("true or false");
                    ok = false;
                }
            },
            "concurrency" => match value.as_scalar().map(Scalar::resolve) {
                Some(Resolved::Int(n)) if (1..=256).contains(&n) => {
                    spec.concurrency = Some(n as usize)
                }
                _ => {
                    bad_type("a whole number from 1 to 256");
                    ok = false;
                }
            },
            other => {
                diagnostics.push(
                    Diagnostic::new(
                        "unknown-key",
                        format!("unknown key `{other}` in `cache.remote`"),
                    )
                    .at(sources.location(entry.key_span))
                    .with_hint(hint_with_suggestion(
                        did_you_mean(other, REMOTE_KEYS),
                        format!("known keys: {}", REMOTE_KEYS.join(", ")),
                    )),
                );
                ok = false;
            }
        }
    }
    ok.then_some(spec)
}

/// The URL checked the way the remote will parse it, so a mistake is
/// reported at its line, not when the run first needs the remote.
fn checked_url(
    url: &str,
    node: &Node,
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) -> Option<String> {
    if url.contains('\0') {
        diagnostics.push(crate::project_files::collect::nul_byte(
            "the remote's URL or directory",
            sources.location(node.span),
        ));
        return None;
    }
    if url == "off" || !url.contains("://") {
        // `off`, or a directory (relative ones are the project's).
        return Some(url.to_string());
    }
    match pipe_cache::remote::Location::parse(url) {
        Ok(_) => Some(url.to_string()),
        Err(bad) => {
            let message = if url.contains('@') {
                "the remote URL carries credentials".to_string()
            } else {
                bad.to_string()
            };
            diagnostics.push(
                Diagnostic::new("bad-remote", message)
                    .at(sources.location(node.span))
                    .with_hint(REMOTE_HINT),
            );
            None
        }
    }
}
