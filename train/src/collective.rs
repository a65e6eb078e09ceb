//! What the replicas of a data-parallel run say to each other: the
//! all-reduce and broadcast DDP needs (`crate::ddp`), and the
//! reduce-scatter and all-gather of the sharded strategies
//! (`crate::shard`, `crate::fsdp`). Between processes it is libtorch's
//! c10d (`crate::c10d`: Gloo on CPUs, NCCL on GPUs); a run on one device
//! has [`Solo`], whose collectives are the identity.
//!
//! A leaf: the trait and its error name no strategy and no backend, so
//! that every one of them can depend on it and none on another.

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

    /// Starts [`Collective::all_gather`] and returns before it is done,
    /// where the backend can (c10d's work runs on its own threads), so
    /// that the caller computes while it travels: `fsdp`'s prefetch of the
    /// next unit. `input` and `output` must stay alive and untouched until
    /// [`Started::wait`] returns. By default it is done on return.
    fn start_all_gather(
        &self,
        input: &Tensor,
        output: &mut Tensor,
    ) -> Result<Started, CollectiveError> {
        self.all_gather(input, output)?;
        Ok(Started::done())
    }
}

/// A collective a backend is still carrying out.
pub trait InFlight {
    /// Returns once the collective is done on this rank (or failed).
    fn wait(self: Box<Self>) -> Result<(), CollectiveError>;
}

/// A started collective: wait on it before reading what it writes.
#[must_use = "a started collective must be waited on before its output is read"]
pub struct Started(Option<Box<dyn InFlight>>);

impl Started {
    /// One that finished before it was returned.
    pub fn done() -> Started {
        Started(None)
    }

    pub fn in_flight(work: Box<dyn InFlight>) -> Started {
        Started(Some(work))
    }

    pub fn wait(self) -> Result<(), CollectiveError> {
        match self.0 {
            Some(work) => work.wait(),
            None => Ok(()),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

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
