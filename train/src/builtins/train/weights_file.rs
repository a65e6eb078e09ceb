//! The checkpoint's `model.safetensors`, written a tensor at a time: the
//! header first (every name, shape and place is known before any weight
//! is present), then each tensor at its place as the strategy hands it
//! over, so that under `fsdp` rank 0 never holds more than the unit being
//! written. The bytes are those `safetensors::serialize` (and
//! `save_pretrained`) would write for the same tensors: the header is made
//! by that crate, and the data go where its header says.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, View};
use tch::{Device, Kind, Tensor};

use pipe_stages::{Result, StageError};

use super::super::classifier::torch;

/// The dtype a checkpoint stores a weight of `kind` in: floats as fp32
/// (bf16-true trains bf16 weights, but checkpoints are fp32 whatever the
/// precision, as Lightning saves them and `from_pretrained` expects by
/// default; the upcast is exact), anything else as it is.
pub(super) fn saved_kind(kind: Kind) -> Kind {
    match kind {
        Kind::BFloat16 | Kind::Half | Kind::Float => Kind::Float,
        other => other,
    }
}

/// The safetensors dtype of a libtorch kind, for the kinds saved here.
pub(super) fn dtype_of(kind: Kind) -> Option<Dtype> {
    Some(match kind {
        Kind::Float => Dtype::F32,
        Kind::BFloat16 => Dtype::BF16,
        Kind::Half => Dtype::F16,
        Kind::Double => Dtype::F64,
        Kind::Int64 => Dtype::I64,
        Kind::Uint8 => Dtype::U8,
        _ => return None,
    })
}

/// A tensor's dtype, shape and length without its data: what the header
/// is made of.
struct Placeholder {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: usize,
}

impl View for &Placeholder {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&[])
    }
    fn data_len(&self) -> usize {
        self.bytes
    }
}

struct Slot {
    /// Where its bytes start in the file.
    offset: u64,
    kind: Kind,
    shape: Vec<i64>,
    written: bool,
}

/// A `model.safetensors` being written; it appears under its name only
/// when every tensor is in ([`WeightsFile::finish`]).
pub(super) struct WeightsFile {
    path: PathBuf,
    partial: PathBuf,
    file: File,
    slots: HashMap<String, Slot>,
    left: usize,
    /// Renamed into place: nothing to remove on drop.
    done: bool,
}

impl Drop for WeightsFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.partial);
        }
    }
}

impl WeightsFile {
    /// A file for the weights of `layout` (name, shape, kind as trained),
    /// with `{"format": "pt"}` as `save_pretrained` writes, sized and with
    /// its header written.
    pub(super) fn create(path: &Path, layout: &[(String, Vec<i64>, Kind)]) -> Result<WeightsFile> {
        let mut placeholders = Vec::with_capacity(layout.len());
        for (name, shape, kind) in layout {
            let kind = saved_kind(*kind);
            let dtype = dtype_of(kind).ok_or_else(|| {
                StageError::Other(format!(
                    "internal: `{name}` is of kind {kind:?}, which a checkpoint does not store"
                ))
            })?;
            let elements: i64 = shape.iter().product();
            placeholders.push((
                name.as_str(),
                Placeholder {
                    dtype,
                    shape: shape.iter().map(|&d| d as usize).collect(),
                    bytes: elements as usize * kind.elt_size_in_bytes(),
                },
            ));
        }
        let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
        // Placeholders carry no data: what comes back is the length and
        // the header, exactly as the crate writes them for the real data.
        let head = safetensors::serialize(
            placeholders.iter().map(|(name, p)| (*name, p)),
            Some(metadata),
        )
        .map_err(|e| StageError::Other(format!("internal: a checkpoint's header: {e}")))?;
        let data_start = head.len() as u64;
        let places = data_offsets(&head)?;
        let mut slots = HashMap::with_capacity(layout.len());
        let mut end = 0u64;
        for (name, shape, kind) in layout {
            let (from, to) = places.get(name.as_str()).copied().ok_or_else(|| {
                StageError::Other(format!("internal: `{name}` is not in its own header"))
            })?;
            end = end.max(to);
            let slot = Slot {
                offset: data_start + from,
                kind: saved_kind(*kind),
                shape: shape.clone(),
                written: false,
            };
            if slots.insert(name.clone(), slot).is_some() {
                return Err(StageError::Other(format!(
                    "internal: two weights named `{name}`"
                )));
            }
        }
        let partial = path.with_file_name(format!(
            ".{}.partial",
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("weights")
        ));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| StageError::io(dir, e))?;
        }
        let file = File::create(&partial).map_err(|e| StageError::io(&partial, e))?;
        file.set_len(data_start + end)
            .and_then(|_| file.write_all_at(&head, 0))
            .map_err(|e| StageError::io(&partial, e))?;
        Ok(WeightsFile {
            path: path.to_path_buf(),
            partial,
            file,
            left: slots.len(),
            slots,
            done: false,
        })
    }

    /// Writes `tensor`, the weight `name`, at its place (in the kind it is
    /// saved in, copied off the device).
    pub(super) fn put(&mut self, name: &str, tensor: &Tensor) -> Result<()> {
        let slot = self.slots.get_mut(name).ok_or_else(|| {
            StageError::Other(format!(
                "internal: `{name}` is not a weight of the checkpoint"
            ))
        })?;
        if slot.written || tensor.size() != slot.shape {
            return Err(StageError::Other(format!(
                "internal: `{name}` written twice, or as {:?} where the checkpoint has {:?}",
                tensor.size(),
                slot.shape
            )));
        }
        let host = tensor
            .f_detach()
            .and_then(|t| t.f_to_kind(slot.kind))
            .and_then(|t| t.f_to_device(Device::Cpu))
            .and_then(|t| t.f_contiguous())
            .map_err(torch)?;
        let numel = host.numel();
        let mut bytes = vec![0u8; numel * slot.kind.elt_size_in_bytes()];
        host.f_copy_data_u8(&mut bytes, numel).map_err(torch)?;
        self.file
            .write_all_at(&bytes, slot.offset)
            .map_err(|e| StageError::io(&self.partial, e))?;
        slot.written = true;
        self.left -= 1;
        Ok(())
    }

    /// Puts the file under its name once every weight is in; a file short
    /// of one is removed, never shown.
    pub(super) fn finish(mut self) -> Result<()> {
        if self.left != 0 {
            let missing = self
                .slots
                .iter()
                .find(|(_, slot)| !slot.written)
                .map_or("?", |(name, _)| name.as_str());
            return Err(StageError::Other(format!(
                "internal: the checkpoint lacks {} weights, e.g. `{missing}`",
                self.left
            )));
        }
        std::fs::rename(&self.partial, &self.path).map_err(|e| StageError::io(&self.path, e))?;
        self.done = true;
        Ok(())
    }
}

/// Each tensor's `[from, to)` in the data, from a header the crate made.
fn data_offsets(head: &[u8]) -> Result<HashMap<String, (u64, u64)>> {
    let bad = || StageError::Other("internal: a checkpoint's header does not parse".into());
    let length = u64::from_le_bytes(
        head.get(..8)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    let json = head.get(8..8 + length as usize).ok_or_else(bad)?;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(json).map_err(|_| bad())?;
    let mut places = HashMap::with_capacity(header.len());
    for (name, info) in header {
        if name == "__metadata__" {
            continue;
        }
        let offsets = info["data_offsets"].as_array().ok_or_else(bad)?;
        let at = |i: usize| {
            offsets
                .get(i)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(bad)
        };
        places.insert(name, (at(0)?, at(1)?));
    }
    Ok(places)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host copy of a tensor as the crate's own writer takes it.
    struct Owned(Dtype, Vec<usize>, Vec<u8>);

    impl View for &Owned {
        fn dtype(&self) -> Dtype {
            self.0
        }
        fn shape(&self) -> &[usize] {
            &self.1
        }
        fn data(&self) -> std::borrow::Cow<'_, [u8]> {
            std::borrow::Cow::Borrowed(&self.2)
        }
        fn data_len(&self) -> usize {
            self.2.len()
        }
    }

    fn owned(tensor: &Tensor) -> Owned {
        let kind = saved_kind(tensor.kind());
        let host = tensor.to_kind(kind).contiguous();
        let mut data = vec![0u8; host.numel() * kind.elt_size_in_bytes()];
        host.copy_data_u8(&mut data, host.numel());
        let shape = tensor.size().iter().map(|&d| d as usize).collect();
        Owned(dtype_of(kind).unwrap(), shape, data)
    }

    /// Written in any order, a bf16 weight among them, the file is byte
    /// for byte what the crate writes for the same tensors at once.
    #[test]
    fn a_file_written_a_tensor_at_a_time_is_the_crates_own() {
        let dir = tempfile::tempdir().unwrap();
        let tensors: Vec<(String, Tensor)> = vec![
            (
                "b.weight".into(),
                Tensor::randn([3, 5], (Kind::Float, Device::Cpu)),
            ),
            (
                "a.bias".into(),
                Tensor::randn([7], (Kind::Float, Device::Cpu)),
            ),
            (
                "c.half".into(),
                Tensor::randn([2, 2], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16),
            ),
            (
                "d.ids".into(),
                Tensor::arange(4, (Kind::Int64, Device::Cpu)),
            ),
        ];
        let layout: Vec<(String, Vec<i64>, Kind)> = tensors
            .iter()
            .map(|(name, t)| (name.clone(), t.size(), t.kind()))
            .collect();
        let path = dir.path().join("model.safetensors");
        let mut file = WeightsFile::create(&path, &layout).unwrap();
        assert!(!path.exists(), "shown before it is complete");
        for (name, tensor) in tensors.iter().rev() {
            file.put(name, tensor).unwrap();
        }
        file.finish().unwrap();
        let copies: Vec<(String, Owned)> =
            tensors.iter().map(|(n, t)| (n.clone(), owned(t))).collect();
        let expected = safetensors::serialize(
            copies.iter().map(|(n, o)| (n.as_str(), o)),
            Some(HashMap::from([("format".to_string(), "pt".to_string())])),
        )
        .unwrap();
        assert!(std::fs::read(&path).unwrap() == expected);
    }

    #[test]
    fn a_file_short_of_a_weight_is_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let layout = vec![
            ("x".to_string(), vec![2], Kind::Float),
            ("y".to_string(), vec![2], Kind::Float),
        ];
        let path = dir.path().join("model.safetensors");
        let mut file = WeightsFile::create(&path, &layout).unwrap();
        file.put("x", &Tensor::ones([2], (Kind::Float, Device::Cpu)))
            .unwrap();
        assert!(file
            .put("x", &Tensor::ones([2], (Kind::Float, Device::Cpu)))
            .is_err());
        assert!(file
            .put("y", &Tensor::ones([3], (Kind::Float, Device::Cpu)))
            .is_err());
        let error = file.finish().unwrap_err().to_string();
        assert!(error.contains("lacks 1 weights, e.g. `y`"), "{error}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
