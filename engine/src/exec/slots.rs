//! What a running stage holds of this machine: CPU slots out of `-j`, and
//! GPUs, handed out by name so that each stage sees only its own
//! (`CUDA_VISIBLE_DEVICES`).

use std::collections::HashMap;

use crate::pipeline::Resources;

/// What a stage asks of this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Request {
    pub cpus: usize,
    pub gpus: usize,
}

impl Request {
    /// A stage on the cluster gets its CPUs and GPUs from Slurm: here it
    /// costs one slot, the thread that waits for its job.
    pub(super) fn of(resources: &Resources, runs_here: bool) -> Request {
        if runs_here {
            Request {
                cpus: resources.cpus as usize,
                gpus: resources.gpus as usize,
            }
        } else {
            Request { cpus: 1, gpus: 0 }
        }
    }
}

/// The answer to a request.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Grant {
    /// Start it with these GPUs (none when it asked for none).
    Start { gpus: Vec<String> },
    /// Not now: what it needs is held by running stages.
    Wait,
    /// Never on this machine: it asks for more GPUs than there are.
    Never { needed: usize, available: usize },
}

pub(super) struct Slots {
    jobs: usize,
    free_cpus: usize,
    gpu_count: usize,
    free_gpus: Vec<String>,
    /// By stage index, what it holds until it finishes.
    held: HashMap<usize, (usize, Vec<String>)>,
}

impl Slots {
    /// `jobs` CPU slots (at least one) and the GPUs in `gpus`.
    pub(super) fn new(jobs: usize, gpus: Vec<String>) -> Slots {
        let jobs = jobs.max(1);
        Slots {
            jobs,
            free_cpus: jobs,
            gpu_count: gpus.len(),
            free_gpus: gpus,
            held: HashMap::new(),
        }
    }

    /// Takes what stage `index` asks for, if it is free. A stage wider
    /// than `-j` still runs, alone.
    pub(super) fn take(&mut self, index: usize, request: Request) -> Grant {
        if request.gpus > self.gpu_count {
            return Grant::Never {
                needed: request.gpus,
                available: self.gpu_count,
            };
        }
        let cpus = request.cpus.clamp(1, self.jobs);
        if cpus > self.free_cpus || request.gpus > self.free_gpus.len() {
            return Grant::Wait;
        }
        self.free_cpus -= cpus;
        let gpus: Vec<String> = self.free_gpus.drain(..request.gpus).collect();
        self.held.insert(index, (cpus, gpus.clone()));
        Grant::Start { gpus }
    }

    /// Gives back what stage `index` held; nothing when it held nothing
    /// (a stage that never started).
    pub(super) fn release(&mut self, index: usize) {
        if let Some((cpus, gpus)) = self.held.remove(&index) {
            self.free_cpus += cpus;
            self.free_gpus.extend(gpus);
        }
    }

    /// Whether no stage holds anything: none is running.
    pub(super) fn idle(&self) -> bool {
        self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    fn ask(cpus: usize, gpus: usize) -> Request {
        Request { cpus, gpus }
    }

    #[test]
    fn cpu_slots_bound_what_runs_at_once() {
        let mut slots = Slots::new(4, Vec::new());
        assert_eq!(slots.take(0, ask(3, 0)), Grant::Start { gpus: vec![] });
        assert_eq!(slots.take(1, ask(2, 0)), Grant::Wait);
        assert_eq!(slots.take(2, ask(1, 0)), Grant::Start { gpus: vec![] });
        slots.release(0);
        assert_eq!(slots.take(1, ask(2, 0)), Grant::Start { gpus: vec![] });
    }

    #[test]
    fn a_stage_wider_than_jobs_runs_alone_and_none_asks_for_at_least_one() {
        let mut slots = Slots::new(2, Vec::new());
        assert_eq!(slots.take(0, ask(8, 0)), Grant::Start { gpus: vec![] });
        assert_eq!(slots.take(1, ask(0, 0)), Grant::Wait, "-j 2 is all taken");
        slots.release(0);
        assert_eq!(slots.take(1, ask(0, 0)), Grant::Start { gpus: vec![] });
        assert_eq!(slots.take(2, ask(0, 0)), Grant::Start { gpus: vec![] });
        assert_eq!(slots.take(3, ask(1, 0)), Grant::Wait);
    }

    #[test]
    fn gpus_are_handed_out_by_name_and_come_back() {
        let mut slots = Slots::new(8, gpus(&["0", "1", "2"]));
        assert_eq!(
            slots.take(0, ask(1, 2)),
            Grant::Start {
                gpus: gpus(&["0", "1"])
            }
        );
        assert_eq!(slots.take(1, ask(1, 2)), Grant::Wait);
        assert_eq!(
            slots.take(2, ask(1, 1)),
            Grant::Start { gpus: gpus(&["2"]) }
        );
        slots.release(0);
        assert_eq!(
            slots.take(1, ask(1, 2)),
            Grant::Start {
                gpus: gpus(&["0", "1"])
            }
        );
    }

    #[test]
    fn more_gpus_than_the_machine_has_is_never() {
        let mut slots = Slots::new(8, gpus(&["0"]));
        assert_eq!(
            slots.take(0, ask(1, 2)),
            Grant::Never {
                needed: 2,
                available: 1
            }
        );
        assert!(slots.idle(), "a refused stage holds nothing");
        let mut none = Slots::new(8, Vec::new());
        assert_eq!(
            none.take(0, ask(1, 1)),
            Grant::Never {
                needed: 1,
                available: 0
            }
        );
    }

    #[test]
    fn idle_until_every_holder_released() {
        let mut slots = Slots::new(2, Vec::new());
        assert!(slots.idle());
        slots.take(5, ask(1, 0));
        slots.take(6, ask(1, 0));
        slots.release(5);
        assert!(!slots.idle());
        slots.release(6);
        slots.release(6);
        assert!(slots.idle());
        assert_eq!(slots.take(7, ask(2, 0)), Grant::Start { gpus: vec![] });
    }

    #[test]
    fn a_stage_on_the_cluster_costs_one_slot_and_no_gpu() {
        let resources = Resources {
            cpus: 16,
            gpus: 4,
            ..Resources::default()
        };
        assert_eq!(Request::of(&resources, false), ask(1, 0));
        assert_eq!(Request::of(&resources, true), ask(16, 4));
    }
}
