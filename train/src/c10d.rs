//! libtorch's distributed engine, c10d, behind [`Collective`]: the TCPStore
//! rendezvous and the Gloo (CPU) or NCCL (CUDA) process group that
//! `torch.distributed.init_process_group` builds, through the C++ shim in
//! shims/csrc/c10d.cpp. pipe implements no collective of its own: every
//! all-reduce, reduce-scatter, all-gather and broadcast below is libtorch's.

use std::ffi::{c_char, c_int, c_void, CString};
use std::time::Duration;

use tch::Tensor;

use crate::collective::{Collective, CollectiveError, InFlight, Started};
use crate::ddp::GradientBuckets;

extern "C" {
    fn pipe_c10d_store_serve(
        port: u16,
        timeout_ms: i64,
        store: *mut *mut c_void,
        bound_port: *mut u16,
        error: *mut c_char,
        error_size: usize,
    ) -> c_int;
    fn pipe_c10d_store_free(store: *mut c_void);
    #[allow(clippy::too_many_arguments)]
    fn pipe_c10d_group_new(
        host: *const c_char,
        port: u16,
        serve_store: c_int,
        rank: c_int,
        world: c_int,
        backend: *const c_char,
        interface_host: *const c_char,
        prefix: *const c_char,
        timeout_ms: i64,
        out: *mut *mut c_void,
        error: *mut c_char,
        error_size: usize,
    ) -> c_int;
    fn pipe_c10d_group_free(group: *mut c_void);
    fn pipe_c10d_all_reduce(
        group: *mut c_void,
        tensor: *mut c_void,
        op: c_int,
        pending: *mut *mut c_void,
        error: *mut c_char,
        error_size: usize,
    ) -> c_int;
    fn pipe_c10d_broadcast(
        group: *mut c_void,
        tensor: *mut c_void,
        root: c_int,
        error: *mut c_char,
        error_size: usize,
    ) -> c_int;
    fn pipe_c10d_reduce_scatter_sum(
        group: *mut c_void,
        input: *mut c_void,
        output: *mut c_void,
        pending: *mut *mut c_void,
        error: *mut c_char,
        error_size: usize,
    ) -> c_int;
    fn pipe_c10d_all_gather(
        group: *mut c_void,
        input: *mut c_void,
        output: *mut c_void,
        pending: *mut *mut c_void,
        error: *mut c_char,
        error_size: usize,
    ) -> c_int;
    fn pipe_c10d_barrier(group: *mut c_void, error: *mut c_char, error_size: usize) -> c_int;
    fn pipe_c10d_wait(pending: *mut c_void, error: *mut c_char, error_size: usize) -> c_int;
    fn pipe_c10d_reducer_new(
        group: *mut c_void,
        parameters: *const *mut c_void,
        sizes: *const usize,
        bucket_count: usize,
        out: *mut *mut c_void,
        error: *mut c_char,
        error_size: usize,
    ) -> c_int;
    fn pipe_c10d_reducer_arm(reducer: *mut c_void, error: *mut c_char, error_size: usize) -> c_int;
    fn pipe_c10d_reducer_finish(
        reducer: *mut c_void,
        overlapped: *mut usize,
        error: *mut c_char,
        error_size: usize,
    ) -> c_int;
    fn pipe_c10d_reducer_free(reducer: *mut c_void);
}

/// Calls a shim function with an error buffer, turning its nonzero return
/// into the C++ exception's message.
fn checked(call: impl FnOnce(*mut c_char, usize) -> c_int) -> Result<(), CollectiveError> {
    crate::ffi::call_shim(call).map_err(CollectiveError::Backend)
}

/// Which c10d process group carries the collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// CPU tensors (and CUDA tensors, staged through the host): what
    /// `torch.distributed` uses on CPUs, and what runs in the tests.
    Gloo,
    /// CUDA tensors, GPU to GPU: only in CUDA builds of libtorch.
    Nccl,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Gloo => "gloo",
            Backend::Nccl => "nccl",
        }
    }
}

/// Where the ranks of one group meet, and who they are.
#[derive(Debug, Clone)]
pub struct Rendezvous {
    /// Host of the TCPStore server.
    pub host: String,
    pub port: u16,
    /// Whether this process runs the store server (rank 0 under Slurm;
    /// nobody when a launcher hosts it).
    pub serve_store: bool,
    pub rank: usize,
    pub world_size: usize,
    /// The address Gloo binds; empty: the host name's (torch's default).
    /// Ranks of one machine bind 127.0.0.1.
    pub interface_host: String,
    /// The prefix of the group's keys in the store; empty: none. Set when
    /// torchrun's agent hosts the store (`/worker/attempt_N`).
    pub store_prefix: String,
    /// How long any rendezvous or collective may wait for a peer before it
    /// fails (`torch.distributed`'s `timeout`).
    pub timeout: Duration,
}

/// A TCPStore server with no ranks of its own: the launcher of local ranks
/// hosts their rendezvous, as torchrun's agent does, so that the port is
/// bound before any rank starts and no two jobs can race for it.
pub struct StoreServer {
    handle: *mut c_void,
    port: u16,
}

impl StoreServer {
    pub fn start(timeout: Duration) -> Result<StoreServer, CollectiveError> {
        let mut handle = std::ptr::null_mut();
        let mut port = 0u16;
        // SAFETY: the out-pointers are this frame's locals; the shim catches
        // every C++ exception and writes at most `size` bytes of message
        // into the buffer `checked` owns (shims/csrc/guarded.h).
        checked(|error, size| unsafe {
            pipe_c10d_store_serve(0, millis(timeout), &mut handle, &mut port, error, size)
        })?;
        Ok(StoreServer { handle, port })
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        // SAFETY: made by pipe_c10d_store_serve, freed once.
        unsafe { pipe_c10d_store_free(self.handle) }
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// This process's membership of a c10d process group.
pub struct ProcessGroup {
    handle: *mut c_void,
    rank: usize,
    world_size: usize,
    backend: Backend,
}

// SAFETY: c10d's process groups are used from any thread in PyTorch; pipe
// calls one from one thread at a time.
unsafe impl Send for ProcessGroup {}

impl ProcessGroup {
    /// Meets the other ranks; returns when all `world_size` have joined,
    /// or fails after the rendezvous' timeout.
    pub fn join(
        rendezvous: &Rendezvous,
        backend: Backend,
    ) -> Result<ProcessGroup, CollectiveError> {
        let host = CString::new(rendezvous.host.as_str())
            .map_err(|_| CollectiveError::Backend("a NUL byte in the store host".into()))?;
        let interface = CString::new(rendezvous.interface_host.as_str())
            .map_err(|_| CollectiveError::Backend("a NUL byte in the interface host".into()))?;
        let prefix = CString::new(rendezvous.store_prefix.as_str())
            .map_err(|_| CollectiveError::Backend("a NUL byte in the store prefix".into()))?;
        let name = CString::new(backend.name()).expect("no NUL in a backend name");
        let mut handle = std::ptr::null_mut();
        // SAFETY: the strings are NUL-terminated CStrings alive for the
        // call (the shim copies them), `handle` a local out-pointer, the
        // error buffer `checked`'s, and no C++ exception crosses the shim.
        checked(|error, size| unsafe {
            pipe_c10d_group_new(
                host.as_ptr(),
                rendezvous.port,
                c_int::from(rendezvous.serve_store),
                rendezvous.rank as c_int,
                rendezvous.world_size as c_int,
                name.as_ptr(),
                interface.as_ptr(),
                prefix.as_ptr(),
                millis(rendezvous.timeout),
                &mut handle,
                error,
                size,
            )
        })?;
        Ok(ProcessGroup {
            handle,
            rank: rendezvous.rank,
            world_size: rendezvous.world_size,
            backend,
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Waits until every rank has called it.
    pub fn barrier(&self) -> Result<(), CollectiveError> {
        // SAFETY: `self.handle` is the live group pipe_c10d_group_new made
        // (freed only by Drop); the error buffer is `checked`'s.
        checked(|error, size| unsafe { pipe_c10d_barrier(self.handle, error, size) })
    }

    /// Starts an all-reduce (sum) without waiting for it: the caller goes on
    /// computing and waits on the returned work before it reads `tensor`.
    pub fn start_all_reduce_sum(&self, tensor: &mut Tensor) -> Result<Pending, CollectiveError> {
        contiguous_in_place(tensor)?;
        let mut pending = std::ptr::null_mut();
        // SAFETY: a live group handle; `as_mut_ptr` is libtorch's tensor
        // behind a `&mut Tensor` alive for the call, and the work the shim
        // returns in `pending` holds its own reference to that tensor, so
        // its storage outlives a `Tensor` dropped before the wait.
        checked(|error, size| unsafe {
            pipe_c10d_all_reduce(
                self.handle,
                tensor.as_mut_ptr() as *mut c_void,
                0,
                &mut pending,
                error,
                size,
            )
        })?;
        Ok(Pending { handle: pending })
    }

    fn all_reduce(&self, tensor: &mut Tensor, op: c_int) -> Result<(), CollectiveError> {
        contiguous_in_place(tensor)?;
        // SAFETY: a live group handle and a tensor borrowed mutably for the
        // call, which waits (no `pending` out-pointer) before it returns.
        checked(|error, size| unsafe {
            pipe_c10d_all_reduce(
                self.handle,
                tensor.as_mut_ptr() as *mut c_void,
                op,
                std::ptr::null_mut(),
                error,
                size,
            )
        })
    }
}

/// c10d works on dense, contiguous tensors; every tensor pipe hands it is
/// one (flat buckets, shards), and this says so rather than copying.
fn contiguous_in_place(tensor: &Tensor) -> Result<(), CollectiveError> {
    if tensor.is_contiguous() {
        Ok(())
    } else {
        Err(CollectiveError::Shape(
            "a collective on a non-contiguous tensor".to_string(),
        ))
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // SAFETY: made by pipe_c10d_group_new, freed once.
        unsafe { pipe_c10d_group_free(self.handle) }
    }
}

/// A collective started and not yet waited on.
#[must_use = "a started collective must be waited on before its tensor is read"]
pub struct Pending {
    handle: *mut c_void,
}

impl Pending {
    pub fn wait(mut self) -> Result<(), CollectiveError> {
        let handle = std::mem::replace(&mut self.handle, std::ptr::null_mut());
        // SAFETY: `handle` is the work the shim returned when the collective
        // started (a `Pending` is made only from a non-null one), taken out
        // of `self` so that Drop does not wait on it again;
        // pipe_c10d_wait frees it whatever it returns, and the error buffer
        // is `checked`'s.
        checked(|error, size| unsafe { pipe_c10d_wait(handle, error, size) })
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.handle.is_null() {
            // Dropped unwaited (an error path): wait, so that the tensor is
            // not freed under a running collective.
            let handle = std::mem::replace(&mut self.handle, std::ptr::null_mut());
            // SAFETY: the work the shim started, not yet waited (the handle
            // is nulled when it is); pipe_c10d_wait frees it either way.
            let _ = checked(|error, size| unsafe { pipe_c10d_wait(handle, error, size) });
        }
    }
}

/// DDP's gradient reducer (shims/csrc/c10d.cpp): a hook on every parameter
/// starts its bucket's all-reduce as soon as backward has produced the
/// bucket's last gradient, so the sums travel while backward computes the
/// layers below, and [`Reducer::finish`] waits for them. The buckets are
/// those of [`GradientBuckets`], started in their order on every rank.
pub struct Reducer {
    handle: *mut c_void,
}

impl Reducer {
    /// Hooks `buckets`' parameters. Their gradients are summed over the
    /// group only between [`Reducer::arm`] and [`Reducer::finish`].
    pub fn new(
        group: &ProcessGroup,
        buckets: &GradientBuckets,
    ) -> Result<Reducer, CollectiveError> {
        let members = buckets.members();
        let sizes: Vec<usize> = members.iter().map(Vec::len).collect();
        let parameters: Vec<*mut c_void> = members
            .iter()
            .flatten()
            .map(|tensor| tensor.as_ptr() as *mut c_void)
            .collect();
        let mut handle = std::ptr::null_mut();
        // SAFETY: `parameters` holds `members`' tensors in bucket order, as
        // many as `sizes` adds up to, both alive for the call (the shim
        // copies each tensor, a reference of its own). The reducer keeps
        // the group's pointer: it must be dropped before `group`, as
        // `Replicated` in a `Replica` is, declared after the `Peers` that
        // holds the group.
        checked(|error, size| unsafe {
            pipe_c10d_reducer_new(
                group.handle,
                parameters.as_ptr(),
                sizes.as_ptr(),
                sizes.len(),
                &mut handle,
                error,
                size,
            )
        })?;
        Ok(Reducer { handle })
    }

    /// Call before the backward of a step's last micro-batch.
    pub fn arm(&mut self) -> Result<(), CollectiveError> {
        // SAFETY: the live reducer pipe_c10d_reducer_new made (freed only by
        // Drop); the error buffer is `checked`'s.
        checked(|error, size| unsafe { pipe_c10d_reducer_arm(self.handle, error, size) })
    }

    /// Call after it: every gradient is then the sum over the ranks.
    /// Returns how many buckets were started during backward.
    pub fn finish(&mut self) -> Result<usize, CollectiveError> {
        let mut overlapped = 0usize;
        // SAFETY: the live reducer, whose group outlives it (`new`); a local
        // out-pointer; the error buffer `checked`'s.
        checked(|error, size| unsafe {
            pipe_c10d_reducer_finish(self.handle, &mut overlapped, error, size)
        })?;
        Ok(overlapped)
    }
}

impl Drop for Reducer {
    fn drop(&mut self) {
        // SAFETY: made by pipe_c10d_reducer_new, freed once; removes the hooks.
        unsafe { pipe_c10d_reducer_free(self.handle) }
    }
}

impl Collective for ProcessGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn all_reduce_sum(&self, tensor: &mut Tensor) -> Result<(), CollectiveError> {
        self.all_reduce(tensor, 0)
    }

    fn all_reduce_max(&self, tensor: &mut Tensor) -> Result<(), CollectiveError> {
        self.all_reduce(tensor, 1)
    }

    fn broadcast(&self, root: usize, tensor: &mut Tensor) -> Result<(), CollectiveError> {
        contiguous_in_place(tensor)?;
        // SAFETY: a live group handle and a tensor borrowed mutably for the
        // call, which waits before it returns.
        checked(|error, size| unsafe {
            pipe_c10d_broadcast(
                self.handle,
                tensor.as_mut_ptr() as *mut c_void,
                root as c_int,
                error,
                size,
            )
        })
    }

    fn reduce_scatter_sum(
        &self,
        input: &Tensor,
        output: &mut Tensor,
    ) -> Result<(), CollectiveError> {
        let part = output.numel();
        if input.numel() != part * self.world_size {
            return Err(CollectiveError::Shape(format!(
                "reduce-scatter of {} elements over {} ranks into {part}",
                input.numel(),
                self.world_size
            )));
        }
        contiguous_in_place(input)?;
        contiguous_in_place(output)?;
        // SAFETY: a live group handle; both tensors borrowed for the call,
        // which waits before it returns, their sizes checked above (c10d
        // reads `world_size` parts of `input` and writes one of `output`).
        checked(|error, size| unsafe {
            pipe_c10d_reduce_scatter_sum(
                self.handle,
                input.as_ptr() as *mut c_void,
                output.as_mut_ptr() as *mut c_void,
                std::ptr::null_mut(),
                error,
                size,
            )
        })
    }

    fn all_gather(&self, input: &Tensor, output: &mut Tensor) -> Result<(), CollectiveError> {
        self.all_gather_into(input, output, false).map(|_| ())
    }

    fn start_all_gather(
        &self,
        input: &Tensor,
        output: &mut Tensor,
    ) -> Result<Started, CollectiveError> {
        Ok(match self.all_gather_into(input, output, true)? {
            Some(pending) => Started::in_flight(Box::new(pending)),
            None => Started::done(),
        })
    }
}

impl InFlight for Pending {
    fn wait(self: Box<Self>) -> Result<(), CollectiveError> {
        Pending::wait(*self)
    }
}

impl ProcessGroup {
    /// c10d's all-gather; with `start`, returned unwaited.
    fn all_gather_into(
        &self,
        input: &Tensor,
        output: &mut Tensor,
        start: bool,
    ) -> Result<Option<Pending>, CollectiveError> {
        let part = input.numel();
        if output.numel() != part * self.world_size {
            return Err(CollectiveError::Shape(format!(
                "all-gather of {part} elements over {} ranks into {}",
                self.world_size,
                output.numel()
            )));
        }
        contiguous_in_place(input)?;
        contiguous_in_place(output)?;
        let mut pending = std::ptr::null_mut();
        // SAFETY: a live group handle; both tensors borrowed for the call,
        // their sizes checked above; a started gather's work holds its own
        // references to them until it is waited on (`Pending`).
        checked(|error, size| unsafe {
            pipe_c10d_all_gather(
                self.handle,
                input.as_ptr() as *mut c_void,
                output.as_mut_ptr() as *mut c_void,
                if start {
                    &mut pending
                } else {
                    std::ptr::null_mut()
                },
                error,
                size,
            )
        })?;
        Ok((!pending.is_null()).then_some(Pending { handle: pending }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddp::GradientBuckets;
    use tch::{Device, Kind};

    /// Runs `body` on `world` ranks, threads of this process that each join
    /// a real Gloo group over loopback, as processes would.
    fn on_ranks<T: Send>(
        world: usize,
        timeout: Duration,
        body: impl Fn(ProcessGroup) -> T + Sync,
    ) -> Vec<T> {
        several_groups_in_one_process();
        let server = StoreServer::start(timeout).unwrap();
        let port = server.port();
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..world)
                .map(|rank| {
                    let body = &body;
                    scope.spawn(move || {
                        let group = ProcessGroup::join(
                            &rendezvous(port, rank, world, timeout),
                            Backend::Gloo,
                        )
                        .unwrap();
                        body(group)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// These tests run ranks as threads, so one process holds several
    /// process groups at once, which a rank process never does. libtorch's
    /// flight recorder (a process-wide log of collectives for debugging
    /// hangs) then races between the groups and can crash the test binary
    /// (a map insert in `FlightRecorder::recordWithResetEnabled`, seen with
    /// gdb under load). It reads its size once, when the first group
    /// records; 0 turns it off for this test process only.
    fn several_groups_in_one_process() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| std::env::set_var("TORCH_FR_BUFFER_SIZE", "0"));
    }

    fn rendezvous(port: u16, rank: usize, world: usize, timeout: Duration) -> Rendezvous {
        Rendezvous {
            host: "127.0.0.1".into(),
            port,
            serve_store: false,
            rank,
            world_size: world,
            interface_host: "127.0.0.1".into(),
            store_prefix: String::new(),
            timeout,
        }
    }

    const TIMEOUT: Duration = Duration::from_secs(30);

    #[test]
    fn all_reduce_gives_every_rank_the_same_sum_many_times_over() {
        let results = on_ranks(3, TIMEOUT, |group| {
            let rank = group.rank();
            let mut sums = Vec::new();
            for round in 0..50 {
                let mut tensor =
                    Tensor::from_slice(&[rank as f32 + round as f32, 1.0, -(rank as f32)]);
                group.all_reduce_sum(&mut tensor).unwrap();
                sums.push(Vec::<f32>::try_from(&tensor).unwrap());
            }
            let mut max = Tensor::from_slice(&[rank as i64, -(rank as i64)]);
            group.all_reduce_max(&mut max).unwrap();
            (sums, Vec::<i64>::try_from(&max).unwrap())
        });
        for (sums, max) in &results {
            for (round, sum) in sums.iter().enumerate() {
                assert_eq!(sum, &[3.0 + 3.0 * round as f32, 3.0, -3.0], "round {round}");
            }
            assert_eq!(max, &[2, 0]);
        }
    }

    /// Values whose float sums depend on the order of the additions.
    fn awkward(rank: usize, len: usize) -> Tensor {
        let values: Vec<f32> = (0..len)
            .map(|i| {
                ((i * 7919 + rank * 104_729) % 1000) as f32 * 1.0e-3 + 1.0e7 * (rank % 2) as f32
            })
            .collect();
        Tensor::from_slice(&values)
    }

    #[test]
    fn reduce_scatter_gives_each_rank_its_slice_of_the_sum_and_all_gather_puts_them_back() {
        for world in [2, 3] {
            let part = 5usize;
            let results = on_ranks(world, TIMEOUT, |group| {
                let rank = group.rank();
                let input = awkward(rank, part * world);
                let mut reduced = input.copy();
                group.all_reduce_sum(&mut reduced).unwrap();
                let mut shard = Tensor::zeros([part as i64], (Kind::Float, Device::Cpu));
                group.reduce_scatter_sum(&input, &mut shard).unwrap();
                let mut gathered =
                    Tensor::zeros([(part * world) as i64], (Kind::Float, Device::Cpu));
                group.all_gather(&shard, &mut gathered).unwrap();
                let expected = reduced.narrow(0, (rank * part) as i64, part as i64);
                (
                    Vec::<f32>::try_from(&shard).unwrap(),
                    Vec::<f32>::try_from(&expected).unwrap(),
                    Vec::<f32>::try_from(&gathered).unwrap(),
                    Vec::<f32>::try_from(&reduced).unwrap(),
                )
            });
            for (rank, (shard, expected, gathered, reduced)) in results.iter().enumerate() {
                for (a, b) in shard.iter().zip(expected) {
                    assert!(
                        (a - b).abs() <= 1.0,
                        "world {world} rank {rank}: {shard:?} vs {expected:?}"
                    );
                }
                assert_eq!(gathered.len(), reduced.len());
                assert_eq!(gathered, &results[0].2, "every rank gathers the same");
            }
        }
    }

    #[test]
    fn broadcast_copies_the_root_everywhere() {
        let results = on_ranks(4, TIMEOUT, |group| {
            let mut tensor = Tensor::from_slice(&[group.rank() as i64 * 10, 7]);
            group.broadcast(2, &mut tensor).unwrap();
            Vec::<i64>::try_from(&tensor).unwrap()
        });
        assert!(
            results.iter().all(|values| values == &[20, 7]),
            "{results:?}"
        );
    }

    #[test]
    fn a_rank_that_leaves_makes_the_others_fail_instead_of_hanging() {
        let results = on_ranks(3, Duration::from_secs(20), |group| {
            // Every connection is up before anyone leaves.
            group.barrier().unwrap();
            if group.rank() == 1 {
                drop(group);
                return "left".to_string();
            }
            let mut tensor = Tensor::from_slice(&[1.0f32]);
            let started = std::time::Instant::now();
            match group.all_reduce_sum(&mut tensor) {
                Err(CollectiveError::Backend(message)) => {
                    format!("failed after {:?}: {message}", started.elapsed())
                }
                other => format!("{other:?}"),
            }
        });
        assert_eq!(results[1], "left");
        for result in [&results[0], &results[2]] {
            assert!(result.starts_with("failed"), "{result}");
        }
    }

    #[test]
    fn a_rendezvous_short_of_ranks_fails_after_its_timeout() {
        several_groups_in_one_process();
        let server = StoreServer::start(Duration::from_secs(2)).unwrap();
        let joined = ProcessGroup::join(
            &rendezvous(server.port(), 0, 2, Duration::from_secs(2)),
            Backend::Gloo,
        );
        let Err(CollectiveError::Backend(message)) = joined else {
            panic!("a group of 2 formed with 1 rank");
        };
        assert!(!message.is_empty());
    }

    #[test]
    fn bucketed_gradients_are_summed_in_place_and_unused_ones_stay_unset() {
        let results = on_ranks(2, TIMEOUT, |group| {
            let used = Tensor::from_slice(&[1.0f32, 2.0, 3.0]).set_requires_grad(true);
            let unused = Tensor::from_slice(&[5.0f32]).set_requires_grad(true);
            let weight = (group.rank() + 1) as f64;
            used.sum(Kind::Float).g_mul_scalar(weight).backward();
            let buckets = GradientBuckets::new(&[used.shallow_clone(), unused.shallow_clone()], 8);
            assert_eq!(buckets.len(), 2);
            buckets.all_reduce_sum(&group).unwrap();
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

    /// The reducer's sums, started from backward's hooks, are the bytes of
    /// the bucketed all-reduce after backward; a parameter backward never
    /// reaches keeps no gradient, and its bucket is still summed.
    #[test]
    fn the_overlapped_reducer_sums_what_the_buckets_sum_and_in_the_same_bits() {
        let results = on_ranks(2, TIMEOUT, |group| {
            let rank = group.rank() as f64;
            let sums = |overlap: bool| {
                // No random numbers: the global generator is shared with
                // the other rank and with tests running beside this one.
                let weights: Vec<Tensor> = (0..5i64)
                    .map(|i| {
                        (Tensor::arange(64 + i, (Kind::Float, Device::Cpu)) * 0.37 + i as f64 * 1e3)
                            .set_requires_grad(true)
                    })
                    .collect();
                let unused = Tensor::ones([3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
                // First in creation order, so in the last bucket: DDP's
                // buckets are started in order, and one whose gradient
                // never comes holds back those after it until finish.
                let mut variables = vec![unused.shallow_clone()];
                variables.extend(weights.iter().map(Tensor::shallow_clone));
                let buckets = GradientBuckets::new(&variables, 600);
                assert!(buckets.len() >= 3);
                let mut reducer = overlap.then(|| Reducer::new(&group, &buckets).unwrap());
                // Two micro-batches: only the second is summed.
                for micro in 0..2 {
                    if micro == 1 {
                        if let Some(reducer) = reducer.as_mut() {
                            reducer.arm().unwrap();
                        }
                    }
                    let loss = weights
                        .iter()
                        .map(|w| (w * (rank + 1.0 + micro as f64)).sin().sum(Kind::Float))
                        .fold(Tensor::zeros([], (Kind::Float, Device::Cpu)), |a, b| a + b);
                    loss.backward();
                }
                match reducer.as_mut() {
                    Some(reducer) => {
                        assert!(
                            reducer.finish().unwrap() >= 1,
                            "no bucket overlapped backward"
                        );
                    }
                    None => buckets.all_reduce_sum(&group).unwrap(),
                }
                assert!(!unused.grad().defined());
                weights
                    .iter()
                    .map(|w| Vec::<f32>::try_from(&w.grad()).unwrap())
                    .collect::<Vec<_>>()
            };
            (sums(false), sums(true))
        });
        for (plain, overlapped) in &results {
            let bits =
                |v: &Vec<Vec<f32>>| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(plain), bits(overlapped));
        }
        assert_eq!(results[0].0, results[1].0, "the ranks disagree");
    }

    #[test]
    fn nccl_on_a_cpu_libtorch_is_a_clear_error() {
        if tch::Cuda::is_available() {
            return; // scripts/gpu-check.sh runs NCCL for real there.
        }
        several_groups_in_one_process();
        let server = StoreServer::start(TIMEOUT).unwrap();
        let Err(CollectiveError::Backend(message)) =
            ProcessGroup::join(&rendezvous(server.port(), 0, 1, TIMEOUT), Backend::Nccl)
        else {
            panic!("NCCL joined on a CPU libtorch");
        };
        assert!(message.contains("NCCL"), "{message}");
    }
}
