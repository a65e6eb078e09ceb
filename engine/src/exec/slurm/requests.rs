//! A stage's request held to the partition's nodes before the run starts.

use super::queue::Partitions;
use crate::executor::SlurmSettings;
use crate::pipeline::Stage;
use crate::Result;

/// Refuses, before anything is submitted or recorded, a stage whose
/// request no node of the partition can meet.
pub(crate) fn check_requests(settings: &SlurmSettings, stages: &[&Stage]) -> Result<()> {
    if stages.is_empty() {
        return Ok(());
    }
    match Partitions::query() {
        Ok(partitions) => {
            let partition = settings.partition.clone().or_else(|| {
                std::env::var("SBATCH_PARTITION")
                    .ok()
                    .filter(|p| !p.is_empty())
            });
            partitions.check(partition.as_deref(), stages)
        }
        // The controller may only be slow; sbatch says what is wrong later.
        Err(error) => {
            tracing::warn!("cannot check the stages' requests against Slurm's partitions: {error}");
            Ok(())
        }
    }
}
