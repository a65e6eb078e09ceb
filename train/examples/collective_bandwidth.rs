//! Benchmark: the all-reduce of one 25 MiB gradient bucket (PyTorch DDP's
//! `bucket_cap_mb`) over N ranks on this machine, through libtorch's Gloo
//! on loopback, as the ranks of a CPU ddp run do it. With `--cfg
//! pipe_bench_local` and PIPE_OLD_DDP naming the old `train/src/ddp.rs`
//! (its `//!` lines removed), it also times the in-process `LocalCollective`
//! that Gloo replaced, side by side in the same run
//! (scripts/bench/collective_bandwidth.sh does both).
//!
//!   cargo run --release -p pipe-train --example collective_bandwidth -- [RANKS] [ROUNDS]
//!
//! Prints, per implementation and world size, the median seconds of one
//! all-reduce and the bus bandwidth (NCCL's convention: 2(N-1)/N x bytes /
//! time), which is what a ring moves per rank.

// `pipe_bench_local` is set only by scripts/bench/collective_bandwidth.sh.
#![allow(unexpected_cfgs)]

use std::time::{Duration, Instant};

use pipe_train::c10d::{Backend, ProcessGroup, Rendezvous, StoreServer};
use pipe_train::collective::Collective;
use tch::{Device, Kind, Tensor};

const BUCKET_BYTES: i64 = 25 << 20;

#[cfg(pipe_bench_local)]
#[allow(dead_code, clippy::all)]
mod old {
    include!(env!("PIPE_OLD_DDP"));
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn report(name: &str, world: usize, seconds: f64) {
    let bytes = BUCKET_BYTES as f64;
    let bus = 2.0 * (world as f64 - 1.0) / world as f64 * bytes / seconds / 1e9;
    println!(
        "{name:<16} ranks {world}  median {:>8.2} ms  bus bandwidth {bus:>6.2} GB/s",
        seconds * 1e3
    );
}

fn gloo(world: usize, rounds: usize) -> f64 {
    let timeout = Duration::from_secs(60);
    let server = StoreServer::start(timeout).expect("store");
    let port = server.port();
    let times: Vec<Vec<f64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                scope.spawn(move || {
                    let group = ProcessGroup::join(
                        &Rendezvous {
                            host: "127.0.0.1".into(),
                            port,
                            serve_store: false,
                            rank,
                            world_size: world,
                            interface_host: "127.0.0.1".into(),
                            store_prefix: String::new(),
                            timeout,
                        },
                        Backend::Gloo,
                    )
                    .expect("join");
                    let mut bucket = Tensor::ones([BUCKET_BYTES / 4], (Kind::Float, Device::Cpu));
                    let mut times = Vec::new();
                    for _ in 0..rounds + 2 {
                        let started = Instant::now();
                        group.all_reduce_sum(&mut bucket).expect("all-reduce");
                        times.push(started.elapsed().as_secs_f64());
                    }
                    times.drain(..2); // warm-up: connections, first touch
                    times
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // A round ends when its slowest rank is done.
    let rounds_max: Vec<f64> = (0..rounds)
        .map(|round| times.iter().map(|t| t[round]).fold(0.0, f64::max))
        .collect();
    median(rounds_max)
}

#[cfg(pipe_bench_local)]
fn local(world: usize, rounds: usize) -> f64 {
    let collective = old::LocalCollective::new(world);
    let times: Vec<Vec<f64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let collective = &collective;
                scope.spawn(move || {
                    let mut bucket = Tensor::ones([BUCKET_BYTES / 4], (Kind::Float, Device::Cpu));
                    let mut times = Vec::new();
                    for _ in 0..rounds + 2 {
                        let started = Instant::now();
                        old::Collective::all_reduce_sum(collective, rank, &mut bucket)
                            .expect("all-reduce");
                        times.push(started.elapsed().as_secs_f64());
                    }
                    times.drain(..2);
                    times
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let rounds_max: Vec<f64> = (0..rounds)
        .map(|round| times.iter().map(|t| t[round]).fold(0.0, f64::max))
        .collect();
    median(rounds_max)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let worlds: Vec<usize> = match args.first() {
        Some(list) => list.split(',').filter_map(|n| n.parse().ok()).collect(),
        None => vec![2, 3],
    };
    let rounds: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(20);
    tch::set_num_threads(1);
    // Ranks as threads: several process groups in one process, where
    // libtorch's flight recorder races (see c10d.rs's tests); off here,
    // before any group exists.
    std::env::set_var("TORCH_FR_BUFFER_SIZE", "0");
    println!(
        "bucket {} MiB, {rounds} rounds after 2 warm-up, median of the slowest rank per round",
        BUCKET_BYTES >> 20
    );
    for &world in &worlds {
        report("gloo (c10d)", world, gloo(world, rounds));
        #[cfg(pipe_bench_local)]
        report("LocalCollective", world, local(world, rounds));
    }
}
