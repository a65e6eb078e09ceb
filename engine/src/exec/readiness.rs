//! Which selected stages may start, given what has finished: a stage is
//! ready once every selected stage it depends on succeeded, and a stage
//! below a failure is skipped without running.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::dag::Dag;

pub(super) struct Readiness<'d> {
    dag: &'d Dag,
    in_selection: Vec<bool>,
    /// For each stage, how many of its selected upstream stages have not
    /// succeeded yet.
    waiting_on: Vec<usize>,
    /// Finished or skipped: a diamond below a failure is skipped once.
    settled: Vec<bool>,
    /// Lowest index first, so that stages start in declaration order.
    ready: BinaryHeap<Reverse<usize>>,
    /// Selected stages neither finished nor skipped.
    remaining: usize,
    /// After an interrupt nothing new becomes ready.
    closed: bool,
}

impl<'d> Readiness<'d> {
    pub(super) fn new(dag: &'d Dag, selected: &[usize]) -> Readiness<'d> {
        let stages = dag.upstream.len();
        let mut in_selection = vec![false; stages];
        for &index in selected {
            in_selection[index] = true;
        }
        let waiting_on: Vec<usize> = dag
            .upstream
            .iter()
            .map(|upstream| upstream.iter().filter(|&&up| in_selection[up]).count())
            .collect();
        let ready = selected
            .iter()
            .copied()
            .filter(|&index| waiting_on[index] == 0)
            .map(Reverse)
            .collect();
        Readiness {
            dag,
            in_selection,
            waiting_on,
            settled: vec![false; stages],
            ready,
            remaining: selected.len(),
            closed: false,
        }
    }

    /// Whether every selected stage has finished or been skipped.
    pub(super) fn done(&self) -> bool {
        self.remaining == 0
    }

    /// Takes every ready stage, lowest index first; those that cannot start
    /// yet go back with `put_back`.
    pub(super) fn take_ready(&mut self) -> Vec<usize> {
        std::iter::from_fn(|| self.ready.pop().map(|Reverse(index)| index)).collect()
    }

    /// Returns stages `take_ready` gave that found no room.
    pub(super) fn put_back(&mut self, indices: impl IntoIterator<Item = usize>) {
        if !self.closed {
            self.ready.extend(indices.into_iter().map(Reverse));
        }
    }

    /// Nothing more starts (Ctrl-C): what is ready is dropped, and what
    /// would become ready stays waiting.
    pub(super) fn close(&mut self) {
        self.closed = true;
        self.ready.clear();
    }

    /// Stage `index` succeeded: its downstream stages whose every selected
    /// upstream has succeeded become ready.
    pub(super) fn succeeded(&mut self, index: usize) {
        self.settle(index);
        for &down in &self.dag.downstream[index] {
            if self.in_selection[down] {
                self.waiting_on[down] -= 1;
                if self.waiting_on[down] == 0 && !self.closed {
                    self.ready.push(Reverse(down));
                }
            }
        }
    }

    /// Stage `index` did not succeed: every selected stage below it is
    /// skipped. Returns them, each with the stage above it that did not
    /// succeed, in the order they were reached; independent branches go on.
    pub(super) fn failed(&mut self, index: usize) -> Vec<(usize, usize)> {
        self.settle(index);
        let mut skipped = Vec::new();
        let mut stack = vec![index];
        while let Some(up) = stack.pop() {
            for &down in &self.dag.downstream[up] {
                if self.in_selection[down] && !self.settled[down] {
                    self.settle(down);
                    skipped.push((down, up));
                    stack.push(down);
                }
            }
        }
        skipped
    }

    fn settle(&mut self, index: usize) {
        if !self.settled[index] {
            self.settled[index] = true;
            self.remaining -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DAG from its edges `(upstream, downstream)`.
    fn dag(stages: usize, edges: &[(usize, usize)]) -> Dag {
        let mut upstream = vec![Vec::new(); stages];
        let mut downstream = vec![Vec::new(); stages];
        for &(up, down) in edges {
            upstream[down].push(up);
            downstream[up].push(down);
        }
        Dag {
            upstream,
            downstream,
            order: (0..stages).collect(),
        }
    }

    #[test]
    fn roots_are_ready_in_declaration_order() {
        let dag = dag(4, &[(0, 1), (2, 3)]);
        let mut readiness = Readiness::new(&dag, &[3, 2, 1, 0]);
        assert_eq!(readiness.take_ready(), vec![0, 2]);
        assert_eq!(readiness.take_ready(), Vec::<usize>::new());
    }

    #[test]
    fn a_stage_waits_for_every_selected_upstream() {
        // 0 and 1 both feed 2.
        let dag = dag(3, &[(0, 2), (1, 2)]);
        let mut readiness = Readiness::new(&dag, &[0, 1, 2]);
        assert_eq!(readiness.take_ready(), vec![0, 1]);
        readiness.succeeded(0);
        assert_eq!(readiness.take_ready(), Vec::<usize>::new());
        readiness.succeeded(1);
        assert_eq!(readiness.take_ready(), vec![2]);
        assert!(!readiness.done());
        readiness.succeeded(2);
        assert!(readiness.done());
    }

    #[test]
    fn an_unselected_upstream_is_not_waited_for() {
        // Only 1 and 2 selected: 0 (upstream of 2) is outside the run.
        let dag = dag(3, &[(0, 2), (1, 2)]);
        let mut readiness = Readiness::new(&dag, &[1, 2]);
        assert_eq!(readiness.take_ready(), vec![1]);
        readiness.succeeded(1);
        assert_eq!(readiness.take_ready(), vec![2]);
    }

    #[test]
    fn a_failure_skips_everything_below_it_once_and_spares_other_branches() {
        // 0 -> 1 -> 3, 0 -> 2 -> 3 (a diamond), and 4 independent.
        let dag = dag(5, &[(0, 1), (0, 2), (1, 3), (2, 3)]);
        let mut readiness = Readiness::new(&dag, &[0, 1, 2, 3, 4]);
        assert_eq!(readiness.take_ready(), vec![0, 4]);
        let mut skipped = readiness.failed(0);
        skipped.sort_unstable();
        assert_eq!(skipped.len(), 3, "3 below the diamond is skipped once");
        assert_eq!(
            skipped.iter().map(|&(down, _)| down).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert!(skipped.contains(&(1, 0)) && skipped.contains(&(2, 0)));
        assert!(!readiness.done(), "4 is still running");
        readiness.succeeded(4);
        assert!(readiness.done());
        assert_eq!(readiness.take_ready(), Vec::<usize>::new());
    }

    #[test]
    fn a_failure_below_a_success_names_its_own_upstream() {
        let dag = dag(3, &[(0, 1), (1, 2)]);
        let mut readiness = Readiness::new(&dag, &[0, 1, 2]);
        readiness.take_ready();
        readiness.succeeded(0);
        assert_eq!(readiness.take_ready(), vec![1]);
        assert_eq!(readiness.failed(1), vec![(2, 1)]);
        assert!(readiness.done());
    }

    #[test]
    fn stages_put_back_come_out_again_in_order() {
        let dag = dag(3, &[]);
        let mut readiness = Readiness::new(&dag, &[0, 1, 2]);
        let ready = readiness.take_ready();
        readiness.put_back(ready.into_iter().rev());
        assert_eq!(readiness.take_ready(), vec![0, 1, 2]);
    }

    #[test]
    fn after_close_nothing_becomes_ready() {
        let dag = dag(3, &[(0, 1)]);
        let mut readiness = Readiness::new(&dag, &[0, 1, 2]);
        assert_eq!(readiness.take_ready(), vec![0, 2]);
        readiness.close();
        readiness.put_back([2]);
        readiness.succeeded(0);
        assert_eq!(readiness.take_ready(), Vec::<usize>::new());
        assert!(!readiness.done(), "1 never ran and was not skipped");
    }
}
