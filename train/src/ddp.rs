//! Data-parallel training (Lightning's `strategy: ddp`): N replicas of the
//! model, one per device, each running its shard of every batch; before
//! each optimizer step the gradients are summed across replicas in buckets,
//! so every replica steps with the same gradient and stays identical.
//!
//! Communication goes through [`Collective`]: the all-reduce and broadcast
//! DDP needs, and the reduce-scatter and all-gather of the sharded
//! strategies (`crate::shard`). [`LocalCollective`] implements them for
//! replicas that are threads of one process (CPU replicas for testing, or several GPUs of one machine);
//! an NCCL backend would implement the same trait with one communicator per
//! device, and nothing else in the training loop would change.
//!
//! Replicas on the CPU share one libtorch generator for dropout and one
//! pool of cores, so they take turns through [`Turns`]: the random draws
//! then come in rank order and a seed still gives the same bytes.

use std::sync::{Condvar, Mutex, MutexGuard};

use tch::Tensor;

#[derive(Debug, thiserror::Error)]
pub enum CollectiveError {
    #[error("another replica failed, so this one stopped")]
    Aborted,
    #[error("internal: collective call with mismatched sizes: {0}")]
    Shape(String),
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

/// What the replicas of a data-parallel run say to each other. Every rank
/// makes the same calls in the same order with tensors of the same shape
/// and kind, as with `torch.distributed`.
pub trait Collective: Send + Sync {
    fn world_size(&self) -> usize;

    /// Replaces `tensor` on every rank with the element-wise sum over the
    /// ranks: the same bits on every rank, whatever its device.
    fn all_reduce_sum(&self, rank: usize, tensor: &mut Tensor) -> Result<(), CollectiveError>;

    /// Replaces `tensor` on every rank with that of rank `root`.
    fn broadcast(
        &self,
        rank: usize,
        root: usize,
        tensor: &mut Tensor,
    ) -> Result<(), CollectiveError>;

    /// Sums `input` (the same length `world_size * output.numel()` on every
    /// rank) over the ranks and gives rank `r` only the `r`-th equal part of
    /// the sum, in `output`: the gradient exchange of ZeRO stage 2, which
    /// leaves each rank the summed gradients of its own shard. The additions
    /// run in rank order, as [`Collective::all_reduce_sum`]'s, so a shard of
    /// the result has the same bits as that slice of an all-reduce.
    fn reduce_scatter_sum(
        &self,
        rank: usize,
        input: &Tensor,
        output: &mut Tensor,
    ) -> Result<(), CollectiveError>;

    /// Concatenates every rank's `input` (the same length on every rank) in
    /// rank order into `output` (`world_size` times as long) on every rank:
    /// how the sharded strategies put the updated shards back together.
    fn all_gather(
        &self,
        rank: usize,
        input: &Tensor,
        output: &mut Tensor,
    ) -> Result<(), CollectiveError>;

    /// Makes every waiting and later call return [`CollectiveError::Aborted`],
    /// so that the ranks still running do not wait forever for one that
    /// failed.
    fn abort(&self);
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking replica poisons the lock; its thread's join reports the
    // panic, and the state behind the lock stays consistent.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A reusable barrier that can be aborted (`std::sync::Barrier` cannot).
struct Barrier {
    parties: usize,
    state: Mutex<BarrierState>,
    wake: Condvar,
}

struct BarrierState {
    arrived: usize,
    generation: u64,
    aborted: bool,
}

impl Barrier {
    fn new(parties: usize) -> Barrier {
        Barrier {
            parties,
            state: Mutex::new(BarrierState {
                arrived: 0,
                generation: 0,
                aborted: false,
            }),
            wake: Condvar::new(),
        }
    }

    fn wait(&self) -> Result<(), CollectiveError> {
        let mut state = lock(&self.state);
        if state.aborted {
            return Err(CollectiveError::Aborted);
        }
        let generation = state.generation;
        state.arrived += 1;
        if state.arrived == self.parties {
            state.arrived = 0;
            state.generation += 1;
            self.wake.notify_all();
            return Ok(());
        }
        while state.generation == generation && !state.aborted {
            state = self
                .wake
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        if state.generation == generation {
            Err(CollectiveError::Aborted)
        } else {
            Ok(())
        }
    }

    fn abort(&self) {
        lock(&self.state).aborted = true;
        self.wake.notify_all();
    }
}

/// [`Collective`] for replicas that are threads of this process.
///
/// An all-reduce is three barriers: every rank posts its tensor; rank 0
/// adds the others' into its own, in rank order (so the sum is the same
/// every run); every other rank copies rank 0's result. Rank 0 does N - 1
/// additions and the others one copy each, which for the 2 to 8 devices
/// of one machine costs less than a ring would in synchronisation.
pub struct LocalCollective {
    world_size: usize,
    posted: Mutex<Vec<Option<Tensor>>>,
    barrier: Barrier,
}

impl LocalCollective {
    pub fn new(world_size: usize) -> LocalCollective {
        LocalCollective {
            world_size,
            posted: Mutex::new((0..world_size).map(|_| None).collect()),
            barrier: Barrier::new(world_size),
        }
    }

    fn post(&self, rank: usize, tensor: Option<&Tensor>) {
        lock(&self.posted)[rank] = tensor.map(Tensor::shallow_clone);
    }

    fn posted_by(&self, rank: usize) -> Result<Tensor, CollectiveError> {
        lock(&self.posted)[rank]
            .as_ref()
            .map(Tensor::shallow_clone)
            // Only after an abort can a rank have left without posting.
            .ok_or(CollectiveError::Aborted)
    }

    fn reduce_into_root(&self, tensor: &mut Tensor) -> Result<(), CollectiveError> {
        for rank in 1..self.world_size {
            let other = self.posted_by(rank)?.f_to_device(tensor.device())?;
            let _ = tensor.f_add_(&other)?;
        }
        Ok(())
    }

    /// Runs `body` and aborts every rank if it fails, so that no rank is
    /// left at a barrier the failed one will never reach.
    fn or_abort<T>(
        &self,
        body: impl FnOnce() -> Result<T, CollectiveError>,
    ) -> Result<T, CollectiveError> {
        let result = body();
        if matches!(result, Err(CollectiveError::Torch(_))) {
            self.abort();
        }
        result
    }
}

impl Collective for LocalCollective {
    fn world_size(&self) -> usize {
        self.world_size
    }

    fn all_reduce_sum(&self, rank: usize, tensor: &mut Tensor) -> Result<(), CollectiveError> {
        if self.world_size == 1 {
            return Ok(());
        }
        tch::no_grad(|| {
            self.post(rank, Some(tensor));
            self.barrier.wait()?;
            if rank == 0 {
                self.or_abort(|| self.reduce_into_root(tensor))?;
            }
            self.barrier.wait()?;
            if rank != 0 {
                self.or_abort(|| {
                    let sum = self.posted_by(0)?;
                    tensor.f_copy_(&sum)?;
                    Ok(())
                })?;
            }
            // Rank 0 must not change its tensor (the next bucket reuses no
            // memory, but the caller may) until every rank has copied it.
            self.barrier.wait()?;
            self.post(rank, None);
            Ok(())
        })
    }

    fn broadcast(
        &self,
        rank: usize,
        root: usize,
        tensor: &mut Tensor,
    ) -> Result<(), CollectiveError> {
        if self.world_size == 1 {
            return Ok(());
        }
        tch::no_grad(|| {
            if rank == root {
                self.post(rank, Some(tensor));
            }
            self.barrier.wait()?;
            if rank != root {
                self.or_abort(|| {
                    let source = self.posted_by(root)?;
                    tensor.f_copy_(&source)?;
                    Ok(())
                })?;
            }
            self.barrier.wait()?;
            if rank == root {
                self.post(rank, None);
            }
            Ok(())
        })
    }

    fn reduce_scatter_sum(
        &self,
        rank: usize,
        input: &Tensor,
        output: &mut Tensor,
    ) -> Result<(), CollectiveError> {
        let part = output.numel() as i64;
        if input.numel() as i64 != part * self.world_size as i64 {
            self.abort();
            return Err(CollectiveError::Shape(format!(
                "reduce-scatter of {} elements over {} ranks into {part}",
                input.numel(),
                self.world_size
            )));
        }
        tch::no_grad(|| {
            if self.world_size == 1 {
                output.f_copy_(&input.f_reshape([-1])?)?;
                return Ok(());
            }
            self.post(rank, Some(input));
            self.barrier.wait()?;
            // Every rank sums its own part: the work is spread over the
            // ranks instead of falling on rank 0 as in the all-reduce.
            self.or_abort(|| {
                let start = rank as i64 * part;
                for source in 0..self.world_size {
                    let slice = self
                        .posted_by(source)?
                        .f_reshape([-1])?
                        .f_narrow(0, start, part)?
                        .f_to_device(output.device())?;
                    if source == 0 {
                        output.f_copy_(&slice)?;
                    } else {
                        let _ = output.f_add_(&slice)?;
                    }
                }
                Ok(())
            })?;
            // No rank may change its input until every rank has read it.
            self.barrier.wait()?;
            self.post(rank, None);
            Ok(())
        })
    }

    fn all_gather(
        &self,
        rank: usize,
        input: &Tensor,
        output: &mut Tensor,
    ) -> Result<(), CollectiveError> {
        let part = input.numel() as i64;
        if output.numel() as i64 != part * self.world_size as i64 {
            self.abort();
            return Err(CollectiveError::Shape(format!(
                "all-gather of {part} elements over {} ranks into {}",
                self.world_size,
                output.numel()
            )));
        }
        tch::no_grad(|| {
            self.post(rank, Some(input));
            self.barrier.wait()?;
            self.or_abort(|| {
                let flat = output.f_view([-1])?;
                for source in 0..self.world_size {
                    let shard = if source == rank {
                        input.shallow_clone()
                    } else {
                        self.posted_by(source)?
                    };
                    flat.f_narrow(0, source as i64 * part, part)?
                        .f_copy_(&shard.f_reshape([-1])?)?;
                }
                Ok(())
            })?;
            self.barrier.wait()?;
            self.post(rank, None);
            Ok(())
        })
    }

    fn abort(&self) {
        self.barrier.abort();
    }
}

/// Ranks taking turns, in rank order, for work that must not run at once.
pub struct Turns {
    world_size: usize,
    state: Mutex<TurnState>,
    wake: Condvar,
}

struct TurnState {
    next: usize,
    aborted: bool,
}

/// Held while it is this rank's turn; dropping it passes the turn on.
pub struct Turn<'a> {
    turns: &'a Turns,
    rank: usize,
}

impl Turns {
    pub fn new(world_size: usize) -> Turns {
        Turns {
            world_size,
            state: Mutex::new(TurnState {
                next: 0,
                aborted: false,
            }),
            wake: Condvar::new(),
        }
    }

    /// Waits until every lower rank has had its turn since this rank's last.
    pub fn take(&self, rank: usize) -> Result<Turn<'_>, CollectiveError> {
        let mut state = lock(&self.state);
        while state.next != rank && !state.aborted {
            state = self
                .wake
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        if state.aborted {
            return Err(CollectiveError::Aborted);
        }
        Ok(Turn { turns: self, rank })
    }

    pub fn abort(&self) {
        lock(&self.state).aborted = true;
        self.wake.notify_all();
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        lock(&self.turns.state).next = (self.rank + 1) % self.turns.world_size;
        self.turns.wake.notify_all();
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

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Sums every gradient across the ranks, in place. A variable without
    /// a gradient (unused by the forward: the same on every replica, which
    /// run the same graph) contributes zeros and keeps no gradient.
    pub fn all_reduce_sum(
        &self,
        collective: &dyn Collective,
        rank: usize,
    ) -> Result<(), CollectiveError> {
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
                collective.all_reduce_sum(rank, &mut flat)?;
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

    fn on_ranks<T: Send>(world: usize, body: impl Fn(usize) -> T + Sync) -> Vec<T> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..world)
                .map(|rank| {
                    let body = &body;
                    scope.spawn(move || body(rank))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn all_reduce_gives_every_rank_the_same_sum_many_times_over() {
        let collective = LocalCollective::new(3);
        let results = on_ranks(3, |rank| {
            let mut sums = Vec::new();
            for round in 0..50 {
                let mut tensor =
                    Tensor::from_slice(&[rank as f32 + round as f32, 1.0, -(rank as f32)]);
                collective.all_reduce_sum(rank, &mut tensor).unwrap();
                sums.push(Vec::<f32>::try_from(&tensor).unwrap());
            }
            sums
        });
        for round in 0..50 {
            let expected = vec![3.0 + 3.0 * round as f32, 3.0, -3.0];
            for rank_sums in &results {
                assert_eq!(rank_sums[round], expected, "round {round}");
            }
        }
    }

    /// Values whose float sums depend on the order of the additions, so
    /// that an order other than the all-reduce's would show in the bits.
    fn awkward(rank: usize, len: usize) -> Tensor {
        let values: Vec<f32> = (0..len)
            .map(|i| {
                ((i * 7919 + rank * 104_729) % 1000) as f32 * 1.0e-3 + 1.0e7 * (rank % 2) as f32
            })
            .collect();
        Tensor::from_slice(&values)
    }

    #[test]
    fn reduce_scatter_gives_each_rank_its_slice_of_the_all_reduce_bit_for_bit() {
        for world in [2, 3] {
            let part = 5;
            let collective = LocalCollective::new(world);
            let results = on_ranks(world, |rank| {
                let input = awkward(rank, part * world);
                let mut reduced = input.copy();
                collective.all_reduce_sum(rank, &mut reduced).unwrap();
                let mut shard = Tensor::zeros([part as i64], (Kind::Float, Device::Cpu));
                collective
                    .reduce_scatter_sum(rank, &input, &mut shard)
                    .unwrap();
                let expected = reduced.narrow(0, (rank * part) as i64, part as i64);
                (
                    Vec::<f32>::try_from(&shard).unwrap(),
                    Vec::<f32>::try_from(&expected).unwrap(),
                )
            });
            for (rank, (shard, expected)) in results.iter().enumerate() {
                let same_bits = shard
                    .iter()
                    .zip(expected)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same_bits,
                    "world {world} rank {rank}: {shard:?} vs {expected:?}"
                );
            }
        }
    }

    #[test]
    fn all_gather_puts_the_shards_together_in_rank_order_on_every_rank() {
        let collective = LocalCollective::new(3);
        let results = on_ranks(3, |rank| {
            let mut gathered = Vec::new();
            for round in 0..20i64 {
                let shard = Tensor::from_slice(&[rank as i64 * 10 + round, rank as i64]);
                let mut all = Tensor::zeros([6], (Kind::Int64, Device::Cpu));
                collective.all_gather(rank, &shard, &mut all).unwrap();
                gathered.push(Vec::<i64>::try_from(&all).unwrap());
            }
            gathered
        });
        for rank_rounds in &results {
            for (round, all) in rank_rounds.iter().enumerate() {
                let r = round as i64;
                assert_eq!(all, &[r, 0, 10 + r, 1, 20 + r, 2]);
            }
        }
    }

    #[test]
    fn mismatched_sizes_are_an_error_that_releases_the_other_ranks() {
        let collective = LocalCollective::new(2);
        let results = on_ranks(2, |rank| {
            let input = Tensor::zeros([4 + rank as i64], (Kind::Float, Device::Cpu));
            let mut output = Tensor::zeros([2], (Kind::Float, Device::Cpu));
            match collective.reduce_scatter_sum(rank, &input, &mut output) {
                Err(CollectiveError::Shape(_)) => "shape",
                Err(CollectiveError::Aborted) => "aborted",
                _ => "other",
            }
        });
        assert_eq!(results[1], "shape");
        assert!(matches!(results[0], "aborted"), "{results:?}");
    }

    #[test]
    fn broadcast_copies_the_root_everywhere() {
        let collective = LocalCollective::new(4);
        let results = on_ranks(4, |rank| {
            let mut tensor = Tensor::from_slice(&[rank as i64 * 10, 7]);
            collective.broadcast(rank, 2, &mut tensor).unwrap();
            Vec::<i64>::try_from(&tensor).unwrap()
        });
        assert!(
            results.iter().all(|values| values == &[20, 7]),
            "{results:?}"
        );
    }

    #[test]
    fn a_failed_rank_releases_the_others_instead_of_hanging_them() {
        let collective = LocalCollective::new(3);
        let turns = Turns::new(3);
        let results = on_ranks(3, |rank| {
            if rank == 1 {
                // Turns first: the others go on to take a turn only once
                // they saw the collective aborted, and must find the turns
                // aborted by then (the other order let rank 0, whose turn
                // comes first, take it in between).
                turns.abort();
                collective.abort();
                return "failed".to_string();
            }
            let mut tensor = Tensor::from_slice(&[1.0f32]);
            match collective.all_reduce_sum(rank, &mut tensor) {
                Err(CollectiveError::Aborted) => {}
                other => return format!("all_reduce: {other:?}"),
            }
            match turns.take(rank) {
                Err(CollectiveError::Aborted) => "released".to_string(),
                Ok(_) => "took a turn".to_string(),
                Err(other) => format!("turn: {other:?}"),
            }
        });
        assert_eq!(results, ["released", "failed", "released"]);
    }

    #[test]
    fn turns_go_round_in_rank_order() {
        let turns = Turns::new(3);
        let log = Mutex::new(Vec::new());
        on_ranks(3, |rank| {
            for _ in 0..4 {
                let _turn = turns.take(rank).unwrap();
                lock(&log).push(rank);
            }
        });
        let log = log.into_inner().unwrap();
        assert_eq!(log, [0, 1, 2].repeat(4));
    }

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
    fn bucketed_gradients_are_summed_in_place_and_unused_ones_stay_unset() {
        let collective = LocalCollective::new(2);
        let results = on_ranks(2, |rank| {
            let used = Tensor::from_slice(&[1.0f32, 2.0, 3.0]).set_requires_grad(true);
            let unused = Tensor::from_slice(&[5.0f32]).set_requires_grad(true);
            let weight = (rank + 1) as f64;
            used.sum(Kind::Float).g_mul_scalar(weight).backward();
            let buckets = GradientBuckets::new(&[used.shallow_clone(), unused.shallow_clone()], 8);
            assert_eq!(buckets.len(), 2);
            buckets.all_reduce_sum(&collective, rank).unwrap();
            (
                Vec::<f32>::try_from(&used.grad()).unwrap(),
                unused.grad().defined(),
            )
        });
        for (grad, unused_defined) in results {
            assert_eq!(grad, [3.0, 3.0, 3.0]);
            assert!(!unused_defined);
        }
    }
}
