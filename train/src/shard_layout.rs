//! How a flat run of variables (a bucket of `deepspeed_stage_2` and
//! `fsdp_shard_grad_op`, a unit of `fsdp`) is cut into one equal part per
//! replica, and how the optimizer's slots map back to the variables they
//! are pieces of. Every sharded strategy cuts the same way: a run of `n`
//! elements is padded to `world * ceil(n / world)` and replica `r` owns the
//! `r`-th part, which may cut a variable in two.

use tch::Tensor;

use crate::optim::AdamW;

/// The cut of one run of variables for one replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardLayout {
    /// Each variable's offset in the run's flat order.
    pub offsets: Vec<i64>,
    /// Elements of the run, padding not counted.
    pub numel: i64,
    /// Elements per replica: `ceil(numel / world)`.
    pub part: i64,
    /// This replica's part in the run's flat order, `[low, high)`: shorter
    /// than `part` (or empty) at the run's end.
    low: i64,
    high: i64,
    world: i64,
}

/// Where one variable's elements inside this replica's part lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    /// The variable's index in the run.
    pub index: usize,
    /// The piece's first element in the variable's flat order.
    pub in_variable: i64,
    /// The piece's first element in the replica's part.
    pub in_part: i64,
    pub len: i64,
}

impl ShardLayout {
    /// The cut for replica `rank` of `world` of variables of `numels`
    /// elements, in the run's order.
    pub fn new(numels: impl IntoIterator<Item = i64>, rank: usize, world: usize) -> ShardLayout {
        let world = world.max(1) as i64;
        let mut offsets = Vec::new();
        let mut numel = 0i64;
        for count in numels {
            offsets.push(numel);
            numel += count;
        }
        let part = (numel + world - 1) / world;
        let rank = rank as i64;
        ShardLayout {
            offsets,
            numel,
            part,
            low: (rank * part).min(numel),
            high: ((rank + 1) * part).min(numel),
            world,
        }
    }

    /// Elements every replica's parts make together, padding included:
    /// the size of a gather's output and of a reduce-scatter's input.
    pub fn padded(&self) -> i64 {
        self.part * self.world
    }

    /// Zeros after the run's last element to fill the last part.
    pub fn padding(&self) -> i64 {
        self.padded() - self.numel
    }

    /// Elements of this replica's part that hold variables; the rest of
    /// the part is padding.
    pub fn filled(&self) -> i64 {
        self.high - self.low
    }

    /// The pieces of this replica's part, in the run's order; a variable
    /// with no element in the part has none.
    pub fn pieces(&self) -> impl Iterator<Item = Piece> + '_ {
        self.offsets
            .iter()
            .enumerate()
            .filter_map(move |(index, &start)| {
                let end = self.offsets.get(index + 1).copied().unwrap_or(self.numel);
                let (from, to) = (start.max(self.low), end.min(self.high));
                (from < to).then_some(Piece {
                    index,
                    in_variable: from - start,
                    in_part: from - self.low,
                    len: to - from,
                })
            })
    }
}

/// The shard pieces AdamW steps, in its two weight-decay groups, each
/// (parameter, gradient) with the (run, variable) it is a piece of.
#[derive(Default)]
pub(crate) struct DecayGroups {
    decayed: Vec<(Tensor, Tensor)>,
    undecayed: Vec<(Tensor, Tensor)>,
    decayed_owners: Vec<(usize, usize)>,
    undecayed_owners: Vec<(usize, usize)>,
}

impl DecayGroups {
    pub fn push(&mut self, decays: bool, param: Tensor, grad: Tensor, owner: (usize, usize)) {
        if decays {
            self.decayed.push((param, grad));
            self.decayed_owners.push(owner);
        } else {
            self.undecayed.push((param, grad));
            self.undecayed_owners.push(owner);
        }
    }

    /// The optimizer over the pieces, and for each of its slots, in its
    /// order, the (run, variable) that slot steps a piece of.
    pub fn into_optimizer(
        self,
        lr: f64,
        weight_decay: f64,
        (beta1, beta2, eps): (f64, f64, f64),
    ) -> (AdamW, Vec<(usize, usize)>) {
        let mut slot_owners = self.decayed_owners;
        slot_owners.extend(self.undecayed_owners);
        let optimizer = AdamW::with_gradients(
            vec![(self.decayed, weight_decay), (self.undecayed, 0.0)],
            lr,
            beta1,
            beta2,
            eps,
        );
        (optimizer, slot_owners)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(numels: &[i64], rank: usize, world: usize) -> Vec<(usize, i64, i64, i64)> {
        ShardLayout::new(numels.iter().copied(), rank, world)
            .pieces()
            .map(|p| (p.index, p.in_variable, p.in_part, p.len))
            .collect()
    }

    #[test]
    fn every_element_is_in_exactly_one_replicas_part() {
        let numels = [5, 0, 4, 1, 7];
        for world in 1..=6 {
            let mut seen = vec![vec![0u32; 7]; numels.len()];
            for rank in 0..world {
                let layout = ShardLayout::new(numels, rank, world);
                assert_eq!(layout.padded(), layout.part * world as i64);
                assert!(layout.padding() < world as i64);
                let mut in_part = 0;
                for piece in layout.pieces() {
                    assert_eq!(piece.in_part, in_part, "pieces fill the part in order");
                    in_part += piece.len;
                    for element in piece.in_variable..piece.in_variable + piece.len {
                        seen[piece.index][element as usize] += 1;
                    }
                }
                assert_eq!(in_part, layout.filled());
            }
            for (index, &count) in numels.iter().enumerate() {
                let times = &seen[index][..count as usize];
                assert!(times.iter().all(|&t| t == 1), "world {world}: {seen:?}");
            }
        }
    }

    #[test]
    fn a_part_may_cut_a_variable_and_the_last_may_be_short_or_empty() {
        // 10 elements over 3 replicas: parts of 4, the last holds 2.
        assert_eq!(pieces(&[6, 4], 0, 3), vec![(0, 0, 0, 4)]);
        assert_eq!(pieces(&[6, 4], 1, 3), vec![(0, 4, 0, 2), (1, 0, 2, 2)]);
        assert_eq!(pieces(&[6, 4], 2, 3), vec![(1, 2, 0, 2)]);
        let last = ShardLayout::new([6, 4], 2, 3);
        assert_eq!((last.filled(), last.padding()), (2, 2));
        // 2 elements over 4 replicas: the last two parts are all padding.
        let empty = ShardLayout::new([2], 3, 4);
        assert_eq!((empty.part, empty.filled()), (1, 0));
        assert_eq!(empty.pieces().count(), 0);
    }
}
