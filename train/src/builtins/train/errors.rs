//! The errors of the training machinery (optimizer, shards, collectives)
//! as stage errors.

use pipe_stages::StageError;

use super::super::classifier::{precision_error, torch};
use crate::collective::CollectiveError;
use crate::fsdp::FsdpError;
use crate::optim::OptimError;
use crate::shard::ShardError;

pub(super) fn optim_error(error: OptimError) -> StageError {
    match error {
        OptimError::Torch(error) => torch(error),
        other => StageError::Other(other.to_string()),
    }
}

pub(super) fn shard_error(error: ShardError) -> StageError {
    match error {
        ShardError::Collective(error) => collective_error(error),
        ShardError::Optim(error) => optim_error(error),
        ShardError::Torch(error) => torch(error),
        other => StageError::Other(other.to_string()),
    }
}

pub(super) fn fsdp_error(error: FsdpError) -> StageError {
    match error {
        FsdpError::Shard(error) => shard_error(error),
        FsdpError::Model(error) => error.into(),
        FsdpError::Precision(error) => precision_error(error),
        FsdpError::Internal(message) => StageError::Other(format!("internal: {message}")),
    }
}

pub(super) fn collective_error(error: CollectiveError) -> StageError {
    match error {
        CollectiveError::Torch(error) => torch(error),
        CollectiveError::Backend(message) => StageError::input(
            format!("torch.distributed: {message}"),
            crate::launch::PEER_FAILURE_HINT,
        ),
        CollectiveError::Shape(_) => StageError::Other(error.to_string()),
    }
}
