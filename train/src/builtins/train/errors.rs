//! The errors of the training machinery (optimizer, strategies,
//! collectives) as stage errors.

use pipe_stages::StageError;

use super::super::classifier::{precision_error, torch};
use crate::collective::CollectiveError;
use crate::optim::OptimError;
use crate::strategy::StrategyError;

pub(super) fn optim_error(error: OptimError) -> StageError {
    match error {
        OptimError::Torch(error) => torch(error),
        other => StageError::Other(other.to_string()),
    }
}

pub(super) fn strategy_error(error: StrategyError) -> StageError {
    match error {
        StrategyError::Collective(error) => collective_error(error),
        StrategyError::Optim(error) => optim_error(error),
        StrategyError::Torch(error) => torch(error),
        StrategyError::Model(error) => error.into(),
        StrategyError::Precision(error) => precision_error(error),
        other => StageError::Other(other.to_string()),
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
