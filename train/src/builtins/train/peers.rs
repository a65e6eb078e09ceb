//! The other replicas of a run, as this one reaches them: nobody (one
//! device), or a c10d process group joined at the rendezvous.

use tch::Device;

use pipe_stages::{Result, StageContext, StageError};

use super::devices::device_name;
use super::params::TrainParams;
use crate::c10d::ProcessGroup;
use crate::collective::{Collective, Solo};
use crate::distributed::RankPlace;

/// Kept as an enum rather than a `Box<dyn Collective>` because ddp's
/// overlapped reducer needs the process group itself, which the
/// `Collective` trait does not expose (it names no backend).
pub(super) enum Peers {
    Alone(Solo),
    Group(ProcessGroup),
}

impl Peers {
    /// Joins the process group of `place`, or none for a run on one device.
    pub(super) fn join(
        context: &StageContext,
        settings: &TrainParams,
        device: Device,
        place: Option<&RankPlace>,
    ) -> Result<Peers> {
        let Some(place) = place else {
            return Ok(Peers::Alone(Solo));
        };
        let backend = settings.backend_for(device)?;
        let group = ProcessGroup::join(&place.rendezvous, backend).map_err(|error| {
            StageError::input(
                format!(
                    "rank {} of {} could not join the others at {}:{}: {error}",
                    place.rendezvous.rank,
                    place.rendezvous.world_size,
                    place.rendezvous.host,
                    place.rendezvous.port
                ),
                "every rank must start within `collective_timeout` seconds; across nodes (Slurm, torchrun), \
                     the first node must be reachable from the others on that port",
            )
        })?;
        // Every rank says so: a rank that fails later is then named
        // with a last line of its own.
        context.message(format!(
            "rank {} of {} joined over {} on {} ({} node{}, started by {})",
            place.rendezvous.rank,
            place.rendezvous.world_size,
            backend.name(),
            device_name(device),
            place.nodes,
            if place.nodes == 1 { "" } else { "s" },
            place.launched_by
        ));
        Ok(Peers::Group(group))
    }

    pub(super) fn collective(&self) -> &dyn Collective {
        match self {
            Peers::Alone(solo) => solo,
            Peers::Group(group) => group,
        }
    }

    /// The c10d group, for what needs more than the collectives (ddp's
    /// reducer hooks into backward); None on one device.
    pub(super) fn process_group(&self) -> Option<&ProcessGroup> {
        match self {
            Peers::Alone(_) => None,
            Peers::Group(group) => Some(group),
        }
    }
}
