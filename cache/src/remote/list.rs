//! Listing the remote, bounded: whoever can write to the remote, or
//! answers at its endpoint, chooses what a listing holds, so a listing is
//! read entry by entry and stops past `untrusted::LISTING_ENTRIES` entries
//! or `untrusted::LISTING` bytes of names (an endless ListObjectsV2, each
//! page announcing another, would otherwise grow without end), and a key
//! outside the listed folder is dropped, never made into a path.

use futures::TryStreamExt;
use opendal::ErrorKind;

use super::shared::Shared;
use crate::untrusted;
use crate::RemoteError;

/// Why a listing gave no paths.
pub(super) enum Refused {
    /// The remote failed (unreachable, refusing, cut off).
    Remote(opendal::Error),
    /// The listing went past its limits.
    Listing(RemoteError),
}

/// The `.json` objects under `dir` (relative to the remote's root, ending
/// in `/`), at any depth, as paths relative to the root.
pub(super) async fn list_json(shared: &Shared, dir: &str) -> Result<Vec<String>, Refused> {
    let listed = format!("{}{dir}", shared.list_prefix);
    let mut lister = match shared.lister().lister_with(&listed).recursive(true).await {
        Ok(lister) => lister,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(Refused::Remote(error)),
    };
    let mut paths = Vec::new();
    let (mut entries, mut bytes) = (0u64, 0u64);
    loop {
        let entry = match lister.try_next().await {
            Ok(Some(entry)) => entry,
            Ok(None) => break,
            Err(error) if error.kind() == ErrorKind::NotFound => break,
            Err(error) => return Err(Refused::Remote(error)),
        };
        entries += 1;
        bytes += entry.path().len() as u64;
        if entries > untrusted::LISTING_ENTRIES || bytes > untrusted::LISTING.bytes {
            return Err(Refused::Listing(RemoteError::ListingTooLarge {
                url: shared.redacted(&shared.url),
                dir: dir.to_string(),
                entries: untrusted::LISTING_ENTRIES,
                bytes: untrusted::human(untrusted::LISTING.bytes),
            }));
        }
        if let Some(path) = kept(entry.path(), &shared.list_prefix, dir) {
            paths.push(path.to_string());
        }
    }
    Ok(paths)
}

/// `key` relative to the remote's root, when it is a `.json` object under
/// `dir` named as pipe names its objects: a server may list keys outside
/// the prefix asked for, or with `..` in them.
fn kept<'a>(key: &'a str, prefix: &str, dir: &str) -> Option<&'a str> {
    let path = key.strip_prefix(prefix)?;
    let inside = path.strip_prefix(dir)?;
    let plain = inside
        .split('/')
        .all(|part| !part.is_empty() && part != "." && part != "..");
    (plain && inside.ends_with(".json")).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::kept;

    #[test]
    fn only_json_objects_inside_the_listed_folder_are_kept() {
        assert_eq!(
            kept("team/runs/abc/u1.json", "team/", "runs/"),
            Some("runs/abc/u1.json")
        );
        assert_eq!(
            kept("runs/abc/u1.json", "", "runs/"),
            Some("runs/abc/u1.json")
        );
        for key in [
            "t",
            "",
            "team/runs",
            "other/runs/abc/u1.json",
            "team/labels/u/1.json",
            "team/runs/abc/",
            "team/runs/abc/u1.txt",
            "team/runs/../x.json",
            "team/runs//x.json",
        ] {
            assert_eq!(kept(key, "team/", "runs/"), None, "{key}");
        }
    }
}
