//! Compares `Cache::hash_path` with what `b3sum` does on the same files
//! (each file in turn, memory-mapped and hashed by all threads when over
//! 16 KiB), and shows that a second pass with a stat cache hashes nothing.
//!
//! `cargo run --release -p pipe-cache --example hash_bench -- DIR [MiB]`
//! creates DIR with about MiB mebibytes (default 1024) of mixed-size files
//! unless it exists, then times both, best of three warm runs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pipe_cache::{Cache, StatCache};

fn generate(dir: &Path, total_mib: u64) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // A quarter of the bytes in each class: small, medium, large, huge.
    let budget = total_mib << 20;
    let classes: [(u64, u64); 4] = [
        (1 << 10, 64 << 10),
        (64 << 10, 1 << 20),
        (1 << 20, 16 << 20),
        (64 << 20, 128 << 20),
    ];
    let mut index = 0u64;
    for (low, high) in classes {
        let mut written = 0;
        while written < budget / 4 {
            let size = (low + next() % (high - low))
                .min(budget / 4 - written)
                .max(1);
            let content: Vec<u8> = (0..size).map(|_| next() as u8).collect();
            let sub = dir.join(format!("d{:02}", index % 16));
            std::fs::create_dir_all(&sub)?;
            std::fs::write(sub.join(format!("f{index:06}")), content)?;
            written += size;
            index += 1;
        }
    }
    Ok(())
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            files(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// `b3sum`'s strategy (b3sum 1.x `hash_path`): sequential over files.
fn b3sum_like(paths: &[PathBuf]) -> std::io::Result<u64> {
    let mut total = 0;
    for path in paths {
        let mut hasher = blake3::Hasher::new();
        hasher.update_mmap_rayon(path)?;
        std::hint::black_box(hasher.finalize());
        total += hasher.count();
    }
    Ok(total)
}

fn best_of<T>(runs: usize, mut work: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..runs {
        let start = Instant::now();
        last = Some(work());
        best = best.min(start.elapsed());
    }
    (best, last.expect("at least one run"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: hash_bench DIR [MiB]")?);
    let mib: u64 = args
        .next()
        .map(|text| text.parse())
        .transpose()?
        .unwrap_or(1024);
    if !dir.exists() {
        generate(&dir, mib)?;
    }
    let mut paths = Vec::new();
    files(&dir, &mut paths)?;
    paths.sort();
    let scratch = tempfile::tempdir()?;
    let cache = Cache::open(&scratch.path().join("cache"))?;

    // Warm the page cache so both sides measure hashing, not the disk.
    b3sum_like(&paths)?;
    let (b3sum_time, bytes) = best_of(3, || b3sum_like(&paths));
    let bytes = bytes?;
    let (pipe_time, artifact) = best_of(3, || cache.hash_path(&dir, &StatCache::disabled()));
    let artifact = artifact?;
    assert_eq!(artifact.size, bytes);
    let gib = bytes as f64 / f64::from(1 << 30);
    println!(
        "{} files, {:.2} GiB, {} threads",
        paths.len(),
        gib,
        rayon::current_num_threads()
    );
    println!(
        "b3sum-like: {:.3} s, {:.2} GiB/s",
        b3sum_time.as_secs_f64(),
        gib / b3sum_time.as_secs_f64()
    );
    println!(
        "pipe-cache: {:.3} s, {:.2} GiB/s",
        pipe_time.as_secs_f64(),
        gib / pipe_time.as_secs_f64()
    );
    println!(
        "ratio: {:.2}",
        b3sum_time.as_secs_f64() / pipe_time.as_secs_f64()
    );

    // With the stat cache a second pass only stats.
    let stat_db = scratch.path().join("stat.db");
    let stat = StatCache::open(&stat_db)?;
    // Files written just now are racily clean; the benchmark ages them.
    for path in &paths {
        std::fs::File::open(path)?
            .set_modified(std::time::SystemTime::now() - Duration::from_secs(10))?;
    }
    cache.hash_path(&dir, &stat)?;
    let hashed_first = stat.files_hashed();
    let start = Instant::now();
    cache.hash_path(&dir, &stat)?;
    println!(
        "stat cache: first pass hashed {hashed_first}, second pass hashed {} in {:.3} s",
        stat.files_hashed() - hashed_first,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
