//! Data-parallel training (Lightning's `strategy: ddp`): N replicas of the
//! model, one per process and device, each running its shard of every
//! batch; before each optimizer step the gradients are summed across
//! replicas in buckets, so every replica steps with the same gradient and
//! stays identical.
//!
//! Communication goes through [`Collective`]: the all-reduce and broadcast
//! DDP needs, and the reduce-scatter and all-gather of the sharded
//! strategies (`crate::shard`). Between processes it is libtorch's c10d
//! (`crate::c10d`: Gloo on CPUs, NCCL on GPUs); a run on one device has
//! [`Solo`], whose collectives are the identity.

use tch::Tensor;

#[derive(Debug, thiserror::Error)]
pub enum CollectiveError {
    #[error("internal: collective call with mismatched sizes: {0}")]
    Shape(String),
    /// What c10d (Gloo, NCCL, the TCPStore) said: a peer that closed its
    /// connection, a timeout, a rendezvous that never completed.
    #[error("torch.distributed: {0}")]
    Backend(String),
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

/// What the replicas of a data-parallel run say to each other. Every rank
/// makes the same calls in the same order with tensors of the same shape
/// and kind, as with `torch.distributed`.
pub trait Collective {
    /// The c10d process group behind it, for what needs more than these
    /// calls (the overlapped reducer); None for [`Solo`].
    fn as_process_group(&self) -> Option<&crate::c10d::ProcessGroup> {
        None
    }

    fn rank(&self) -> usize;

    fn world_size(&self) -> usize;

    /// Replaces `tensor` on every rank with the element-wise sum over the
    /// ranks: the same bits on every rank.
    fn all_reduce_sum(&self, tensor: &mut Tensor) -> Result<(), CollectiveError>;

    /// Replaces `tensor` on every rank with the element-wise maximum.
    fn all_reduce_max(&self, tensor: &mut Tensor) -> Result<(), CollectiveError>;

    /// Replaces `tensor` on every rank with that of rank `root`.
    fn broadcast(&self, root: usize, tensor: &mut Tensor) -> Result<(), CollectiveError>;

    /// Sums `input` (the same length `world_size * output.numel()` on every
    /// rank) over the ranks and gives rank `r` only the `r`-th equal part of
    /// the sum, in `output`: the gradient exchange of ZeRO stage 2 and FSDP,
    /// which leaves each rank the summed gradients of its own shard.
    fn reduce_scatter_sum(
        &self,
        input: &Tensor,
        output: &mut Tensor,
    ) -> Result<(), CollectiveError>;

    /// Concatenates every rank's `input` (the same length on every rank) in
    /// rank order into `output` (`world_size` times as long) on every rank:
    /// how the sharded strategies put the updated shards back together.
    fn all_gather(&self, input: &Tensor, output: &mut Tensor) -> Result<(), CollectiveError>;
}

/// The collective of a world of one: a sharded strategy on one device
/// still cuts its (single) shard and calls these, and they cost a copy at
/// most.
pub struct Solo;

impl Collective for Solo {
    fn rank(&self) -> usize {
        0
    }

    fn world_size(&self) -> usize {
        1
    }

    fn all_reduce_sum(&self, _tensor: &mut Tensor) -> Result<(), CollectiveError> {
        Ok(())
    }

    fn all_reduce_max(&self, _tensor: &mut Tensor) -> Result<(), CollectiveError> {
        Ok(())
    }

    fn broadcast(&self, _root: usize, _tensor: &mut Tensor) -> Result<(), CollectiveError> {
        Ok(())
    }

    fn reduce_scatter_sum(
        &self,
        input: &Tensor,
        output: &mut Tensor,
    ) -> Result<(), CollectiveError> {
        same_length(input, output)?;
        tch::no_grad(|| output.f_copy_(&input.f_reshape([-1])?))?;
        Ok(())
    }

    fn all_gather(&self, input: &Tensor, output: &mut Tensor) -> Result<(), CollectiveError> {
        same_length(input, output)?;
        tch::no_grad(|| output.f_view([-1])?.f_copy_(&input.f_reshape([-1])?))?;
        Ok(())
    }
}

fn same_length(input: &Tensor, output: &Tensor) -> Result<(), CollectiveError> {
    if input.numel() == output.numel() {
        Ok(())
    } else {
        Err(CollectiveError::Shape(format!(
            "{} elements into {} on one rank",
            input.numel(),
            output.numel()
        )))
    }
}

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

    #[test]
    fn solo_reduce_scatter_and_all_gather_copy_and_check_lengths() {
        let input = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
        let mut output = Tensor::zeros([3], (Kind::Float, Device::Cpu));
        Solo.reduce_scatter_sum(&input, &mut output).unwrap();
        assert_eq!(Vec::<f32>::try_from(&output).unwrap(), [1.0, 2.0, 3.0]);
        let mut short = Tensor::zeros([2], (Kind::Float, Device::Cpu));
        assert!(matches!(
            Solo.all_gather(&input, &mut short),
            Err(CollectiveError::Shape(_))
        ));
    }
}
