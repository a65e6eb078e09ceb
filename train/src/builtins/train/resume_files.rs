//! The files of a resume state, and how they are read back. They lie in
//! `.pipe/`, where anything may have been put, so every read is of a
//! regular file (no link followed, no FIFO waited on) of bounded size, and
//! every file carries a digest of its content: a truncated or flipped file
//! is an error here, which the caller turns into a fresh start.
//!
//! Tensors are safetensors (the crate checks the header against the
//! buffer) whose metadata holds the blake3 of every tensor's name, dtype,
//! shape and bytes; the progress file is JSON after a line with its own
//! blake3. Floats are kept as their bits: JSON's decimal text may read
//! back one ulp off, and a resumed run must continue from exactly the
//! numbers the interrupted one had.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use safetensors::{Dtype, SafeTensors};

use super::checkpoint::SavedTensor;

/// The first word of every file of a resume state; bumped when their
/// meaning changes, so that an older worker's state is ignored.
pub(super) const FORMAT: &str = "pipe-resume-v2";

/// The most a progress file may take: its lines grow with the steps'
/// curve, about 150 bytes per line.
pub(super) const PROGRESS_LIMIT: u64 = 64 * 1024 * 1024;

/// `#[serde(with = "bits")]`: an f64 as the u64 of its bits, exact.
pub(super) mod bits {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(value.to_bits())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
        Ok(f64::from_bits(u64::deserialize(deserializer)?))
    }
}

/// `path` opened for reading if it is a regular file of at most `limit`
/// bytes, without following a link or waiting on a FIFO; and its length.
fn open_bounded(path: &Path, limit: u64) -> Result<(std::fs::File, u64), String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot open `{}`: {e}", path.display()))?;
    let found = file
        .metadata()
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    if !found.is_file() {
        return Err(format!("`{}` is not a regular file", path.display()));
    }
    if found.len() > limit {
        return Err(format!(
            "`{}` holds {} bytes, more than the {limit} a state of this run can",
            path.display(),
            found.len()
        ));
    }
    Ok((file, found.len()))
}

/// The blake3 of a regular file of at most `limit` bytes, read a piece at
/// a time (a checkpoint is hundreds of megabytes).
pub(super) fn file_digest(path: &Path, limit: u64) -> Result<String, String> {
    let (file, _) = open_bounded(path, limit)?;
    let mut hasher = blake3::Hasher::new();
    let copied = std::io::copy(&mut file.take(limit + 1), &mut hasher)
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    if copied > limit {
        return Err(format!("`{}` grew past {limit} bytes", path.display()));
    }
    Ok(hasher.finalize().to_hex().to_string())
}

/// The most a safetensors header may take, as the crate allows.
const HEADER_LIMIT: u64 = 100_000_000;

/// Each tensor's name, dtype and shape from the header of a safetensors
/// file of at most `limit` bytes, reading no more than the header.
pub(super) fn weights_header(
    path: &Path,
    limit: u64,
) -> Result<Vec<(String, Dtype, Vec<usize>)>, String> {
    let (mut file, length) = open_bounded(path, limit)?;
    let bad = |why: &str| format!("`{}` {why}", path.display());
    let mut size = [0u8; 8];
    file.read_exact(&mut size)
        .map_err(|_| bad("is not safetensors (shorter than its header)"))?;
    let size = u64::from_le_bytes(size);
    if size > HEADER_LIMIT || size + 8 > length {
        return Err(bad("is not safetensors (its header does not fit)"));
    }
    let mut header = vec![0u8; size as usize];
    file.read_exact(&mut header)
        .map_err(|_| bad("is not safetensors (shorter than its header)"))?;
    let header: HashMap<String, serde_json::Value> = serde_json::from_slice(&header)
        .map_err(|_| bad("is not safetensors (its header does not parse)"))?;
    let mut tensors = Vec::with_capacity(header.len());
    for (name, info) in header {
        if name == "__metadata__" {
            continue;
        }
        let dtype: Dtype = serde_json::from_value(info["dtype"].clone())
            .map_err(|_| bad("is not safetensors (a tensor without a dtype)"))?;
        let shape: Vec<usize> = serde_json::from_value(info["shape"].clone())
            .map_err(|_| bad("is not safetensors (a tensor without a shape)"))?;
        tensors.push((name, dtype, shape));
    }
    Ok(tensors)
}

/// The bytes of `path`, if it is a regular file of at most `limit` bytes.
/// Opened without following a link and without blocking (a FIFO answers
/// at once, and is refused as not a file).
pub(super) fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    let (file, length) = open_bounded(path, limit)?;
    let mut bytes = Vec::with_capacity(length as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    if bytes.len() as u64 > limit {
        return Err(format!("`{}` grew past {limit} bytes", path.display()));
    }
    Ok(bytes)
}

/// The digest a tensor file carries: of each tensor's name, dtype, shape
/// and bytes, in name order, lengths first so that no two lists hash alike.
fn digest_of<'a>(tensors: impl Iterator<Item = (&'a str, Dtype, &'a [usize], &'a [u8])>) -> String {
    let mut sorted: Vec<_> = tensors.collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut hasher = blake3::Hasher::new();
    hasher.update(&(sorted.len() as u64).to_le_bytes());
    for (name, dtype, shape, data) in sorted {
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        let dtype = format!("{dtype:?}");
        hasher.update(&(dtype.len() as u64).to_le_bytes());
        hasher.update(dtype.as_bytes());
        hasher.update(&(shape.len() as u64).to_le_bytes());
        for dim in shape {
            hasher.update(&(*dim as u64).to_le_bytes());
        }
        hasher.update(&(data.len() as u64).to_le_bytes());
        hasher.update(data);
    }
    hasher.finalize().to_hex().to_string()
}

/// Writes `tensors` as safetensors with their digest in the metadata.
pub(super) fn write_tensors(path: &Path, tensors: &[(String, SavedTensor)]) -> Result<(), String> {
    let digest = digest_of(
        tensors
            .iter()
            .map(|(name, t)| (name.as_str(), t.dtype(), t.shape(), t.data())),
    );
    let metadata = HashMap::from([
        ("format".to_string(), FORMAT.to_string()),
        ("blake3".to_string(), digest),
    ]);
    let views = tensors.iter().map(|(name, tensor)| (name.as_str(), tensor));
    safetensors::serialize_to_file(views, Some(metadata), path)
        .map_err(|e| format!("cannot write `{}`: {e}", path.display()))
}

/// The tensors of a file [`write_tensors`] wrote, by name, if it is one
/// of at most `limit` bytes whose digest holds.
pub(super) fn read_tensors(
    path: &Path,
    limit: u64,
) -> Result<HashMap<String, SavedTensor>, String> {
    let bytes = read_bounded(path, limit)?;
    let bad = |why: String| format!("`{}` {why}", path.display());
    let (_, metadata) =
        SafeTensors::read_metadata(&bytes).map_err(|e| bad(format!("is not safetensors: {e}")))?;
    let told = metadata.metadata().clone().unwrap_or_default();
    if told.get("format").map(String::as_str) != Some(FORMAT) {
        return Err(bad(format!("is not a {FORMAT} file")));
    }
    let file =
        SafeTensors::deserialize(&bytes).map_err(|e| bad(format!("is not safetensors: {e}")))?;
    let tensors = file.tensors();
    let digest = digest_of(
        tensors
            .iter()
            .map(|(name, view)| (name.as_str(), view.dtype(), view.shape(), view.data())),
    );
    if told.get("blake3") != Some(&digest) {
        return Err(bad(
            "does not hold what was written (its digest differs)".into()
        ));
    }
    Ok(tensors
        .into_iter()
        .map(|(name, view)| {
            let saved =
                SavedTensor::from_parts(view.dtype(), view.shape().to_vec(), view.data().to_vec());
            (name, saved)
        })
        .collect())
}

/// Writes `text` after a line of the format and its blake3.
pub(super) fn write_checked(path: &Path, text: &str) -> Result<(), String> {
    let digest = blake3::hash(text.as_bytes()).to_hex();
    std::fs::write(path, format!("{FORMAT} {digest}\n{text}"))
        .map_err(|e| format!("cannot write `{}`: {e}", path.display()))
}

/// The text [`write_checked`] wrote, if its digest holds.
pub(super) fn read_checked(path: &Path, limit: u64) -> Result<String, String> {
    let bytes = read_bounded(path, limit)?;
    let text = String::from_utf8(bytes).map_err(|_| format!("`{}` is not text", path.display()))?;
    let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let expected = format!("{FORMAT} {}", blake3::hash(rest.as_bytes()).to_hex());
    if first != expected {
        return Err(format!(
            "`{}` does not hold what was written (its digest differs, or it is not a {FORMAT} file)",
            path.display()
        ));
    }
    Ok(rest.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(data: &[f32]) -> SavedTensor {
        let bytes: Vec<u8> = data.iter().flat_map(|value| value.to_le_bytes()).collect();
        SavedTensor::from_parts(Dtype::F32, vec![data.len()], bytes)
    }

    #[test]
    fn tensors_read_back_as_written_and_a_flipped_or_cut_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.safetensors");
        let tensors = vec![
            ("b".to_string(), tensor(&[1.0, 2.5])),
            ("a".to_string(), tensor(&[-3.0])),
        ];
        write_tensors(&path, &tensors).unwrap();
        let read = read_tensors(&path, 1 << 20).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read["b"].data(), tensors[0].1.data());
        assert_eq!(read["a"].shape(), &[1]);

        let bytes = std::fs::read(&path).unwrap();
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        std::fs::write(&path, &flipped).unwrap();
        let refused = read_tensors(&path, 1 << 20).err().unwrap();
        assert!(refused.contains("digest differs"), "{refused}");

        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let refused = read_tensors(&path, 1 << 20).err().unwrap();
        assert!(refused.contains("is not safetensors"), "{refused}");

        std::fs::write(&path, &bytes).unwrap();
        let refused = read_tensors(&path, 10).err().unwrap();
        assert!(refused.contains("more than the 10"), "{refused}");
    }

    /// A FIFO where a file should be answers at once instead of blocking,
    /// and a link is not followed.
    #[test]
    fn a_fifo_or_a_link_in_place_of_a_file_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("progress.json");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let refused = read_checked(&fifo, PROGRESS_LIMIT).err().unwrap();
        assert!(refused.contains("not a regular file"), "{refused}");

        let target = dir.path().join("elsewhere");
        write_checked(&target, "{}").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(read_checked(&link, PROGRESS_LIMIT).is_err());
        assert_eq!(read_checked(&target, PROGRESS_LIMIT).unwrap(), "{}");
    }

    #[test]
    fn checked_text_with_a_changed_byte_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("progress.json");
        write_checked(&path, "{\"epochs_done\": 1}").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace('1', "2")).unwrap();
        assert!(read_checked(&path, PROGRESS_LIMIT).is_err());
    }
}
