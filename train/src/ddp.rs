//! Data-parallel training (Lightning's `strategy: ddp`): N replicas of the
//! model, one per process and device, each running its shard of every
//! batch; before each optimizer step the gradients are summed across
//! replicas in buckets, so every replica steps with the same gradient and
//! stays identical. The sums go through `crate::collective::Collective`.

use tch::Tensor;

use crate::collective::{Collective, CollectiveError};

/// A replica's trainable variables grouped for the gradient all-reduce:
/// one flat tensor per bucket instead of one collective call per tensor
/// (BERT-base has 201), and buckets rather than one flat copy of every
/// gradient so that the extra memory stays at one bucket. Buckets follow
/// the reverse of creation order, as PyTorch's DDP, because that is
/// roughly the order in which backward produces the gradients, and never
/// mix kinds or devices.
pub struct GradientBuckets {
    buckets: Vec<Vec<Tensor>>,
}

impl GradientBuckets {
    /// PyTorch DDP's default `bucket_cap_mb`.
    pub const DEFAULT_CAP_BYTES: usize = 25 << 20;

    pub fn new(variables: &[Tensor], cap_bytes: usize) -> GradientBuckets {
        GradientBuckets {
            buckets: bucket_indices(variables, cap_bytes)
                .into_iter()
                .map(|members| {
                    members
                        .into_iter()
                        .map(|index| variables[index].shallow_clone())
                        .collect()
                })
                .collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// The variables of each bucket, in the order they are flattened.
    pub fn members(&self) -> &[Vec<Tensor>] {
        &self.buckets
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Sums every gradient across the ranks, in place. A variable without
    /// a gradient (unused by the forward: the same on every replica, which
    /// run the same graph) contributes zeros and keeps no gradient.
    pub fn all_reduce_sum(&self, collective: &dyn Collective) -> Result<(), CollectiveError> {
        tch::no_grad(|| {
            for bucket in &self.buckets {
                let mut parts = Vec::with_capacity(bucket.len());
                for variable in bucket {
                    let grad = variable.grad();
                    parts.push(if grad.defined() {
                        grad.f_reshape([-1])?
                    } else {
                        Tensor::f_zeros(
                            [variable.numel() as i64],
                            (variable.kind(), variable.device()),
                        )?
                    });
                }
                let mut flat = Tensor::f_cat(&parts, 0)?;
                drop(parts);
                collective.all_reduce_sum(&mut flat)?;
                let mut offset = 0i64;
                for variable in bucket {
                    let numel = variable.numel() as i64;
                    let mut grad = variable.grad();
                    if grad.defined() {
                        let part = flat.f_narrow(0, offset, numel)?.f_view_as(&grad)?;
                        grad.f_copy_(&part)?;
                    }
                    offset += numel;
                }
            }
            Ok(())
        })
    }
}

/// The buckets of [`GradientBuckets`] as indices into `variables`: the
/// reverse of creation order, cut at `cap_bytes`, never mixing kinds or
/// devices. The sharded strategies cut their shards from the same buckets.
pub fn bucket_indices(variables: &[Tensor], cap_bytes: usize) -> Vec<Vec<usize>> {
    let mut buckets: Vec<Vec<usize>> = Vec::new();
    let mut bytes = 0;
    for (index, variable) in variables.iter().enumerate().rev() {
        let size = variable.numel() * variable.kind().elt_size_in_bytes();
        let fits = buckets.last().is_some_and(|bucket| {
            let first = &variables[bucket[0]];
            first.kind() == variable.kind()
                && first.device() == variable.device()
                && bytes + size <= cap_bytes
        });
        if fits {
            bytes += size;
        } else {
            buckets.push(Vec::new());
            bytes = size;
        }
        if let Some(bucket) = buckets.last_mut() {
            bucket.push(index);
        }
    }
    buckets
}

/// Whether two replicas hold the same bits in every variable (the check
/// that DDP kept them in step). Bytes, not `equal`: NaN never equals
/// itself, and this looks for a diverged replica, not a numeric match.
pub fn same_weights(
    a: &[(String, Tensor)],
    b: &[(String, Tensor)],
) -> Result<bool, CollectiveError> {
    if a.len() != b.len() {
        return Ok(false);
    }
    for ((name_a, tensor_a), (name_b, tensor_b)) in a.iter().zip(b) {
        if name_a != name_b
            || tensor_a.size() != tensor_b.size()
            || tensor_a.kind() != tensor_b.kind()
        {
            return Ok(false);
        }
        if host_bytes(tensor_a)? != host_bytes(tensor_b)? {
            return Ok(false);
        }
    }
    Ok(true)
}

fn host_bytes(tensor: &Tensor) -> Result<Vec<u8>, CollectiveError> {
    let host = tensor
        .f_detach()?
        .f_to_device(tch::Device::Cpu)?
        .f_contiguous()?;
    let numel = host.numel();
    let mut bytes = vec![0u8; numel * host.kind().elt_size_in_bytes()];
    host.f_copy_data_u8(&mut bytes, numel)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn buckets_keep_to_the_cap_and_never_mix_kinds() {
        let variables = [
            Tensor::zeros([100], (Kind::Float, Device::Cpu)),
            Tensor::zeros([100], (Kind::Float, Device::Cpu)),
            Tensor::zeros([10], (Kind::BFloat16, Device::Cpu)),
            Tensor::zeros([300], (Kind::Float, Device::Cpu)),
            Tensor::zeros([50], (Kind::Float, Device::Cpu)),
        ];
        // 800 bytes: the 300 floats (1200 bytes) get a bucket of their own.
        let buckets = GradientBuckets::new(&variables, 800);
        let sizes: Vec<Vec<i64>> = buckets
            .buckets
            .iter()
            .map(|bucket| bucket.iter().map(Tensor::numel).map(|n| n as i64).collect())
            .collect();
        assert_eq!(sizes, vec![vec![50], vec![300], vec![10], vec![100, 100]]);
    }
}
