//! Where a step's time goes: forward, backward, collectives, optimizer.

use std::time::Instant;

use tch::Device;

use crate::hardware;
use crate::strategy;

/// On a GPU, phases are timed on one step in this many (see `PhaseClock`).
pub(super) const PHASE_SAMPLE: u64 = 10;

#[derive(Debug, Clone, Copy)]
pub(super) enum Phase {
    Forward,
    Backward,
    Collective,
    Optimizer,
    /// Collating, waiting for a CPU replica's turn, the rest.
    Other,
}

impl From<strategy::Phase> for Phase {
    fn from(phase: strategy::Phase) -> Phase {
        match phase {
            strategy::Phase::Forward => Phase::Forward,
            strategy::Phase::Backward => Phase::Backward,
            strategy::Phase::Collective => Phase::Collective,
        }
    }
}

/// Splits one step's time into phases. GPU work is asynchronous, so a
/// phase's end is only known after a device sync: a timed step on a GPU
/// syncs at every lap (which slows that step a little), an untimed one
/// records nothing. On the CPU every step is timed, for free.
pub(super) struct PhaseClock {
    pub(super) device: Device,
    pub(super) timed: bool,
    pub(super) last: Instant,
    pub(super) seconds: [f64; 5],
}

impl PhaseClock {
    pub(super) fn new(device: Device, timed: bool) -> PhaseClock {
        PhaseClock {
            device,
            timed,
            last: Instant::now(),
            seconds: [0.0; 5],
        }
    }

    /// Ends the phase running since the last lap, which was `phase`.
    pub(super) fn lap(&mut self, phase: Phase) {
        if !self.timed {
            return;
        }
        hardware::synchronize(self.device);
        let now = Instant::now();
        self.seconds[phase as usize] += (now - self.last).as_secs_f64();
        self.last = now;
    }
}

/// A replica's phase times summed over its timed steps.
#[derive(Debug, Default)]
pub(super) struct PhaseTimes {
    pub(super) steps: u64,
    pub(super) seconds: [f64; 5],
}

impl PhaseTimes {
    pub(super) fn add(&mut self, clock: &PhaseClock, step_seconds: f64) {
        if !clock.timed {
            return;
        }
        self.steps += 1;
        let counted: f64 = clock.seconds.iter().sum();
        for (total, phase) in self.seconds.iter_mut().zip(clock.seconds) {
            *total += phase;
        }
        // Whatever no lap caught (the step's bookkeeping) is `other`.
        self.seconds[Phase::Other as usize] += (step_seconds - counted).max(0.0);
    }
}
