//! NCCL's all-reduce through headroom-collectives, one rank a GPU: each rank a thread of this process
//! on its own device (NCCL's ranks may share a process), every GPU of the machine by default.
//! For f32 arrays from 1 MiB to 256 MiB it times the all-reduce (each call waits for its
//! completion, as `NcclCollective` does) and reports the algorithm bandwidth (bytes / seconds)
//! and the bus bandwidth (NCCL's convention: the algorithm bandwidth times 2(n-1)/n, what each
//! link carries; 0 for one rank). Prints a table, then one JSON line per size with the keys
//! `op, dtype, bytes, ranks, seconds, alg_gbps, bus_gbps`; `benches/peers/torch_allreduce.py`
//! prints the same keys for `torch.distributed` over NCCL.
//!
//! `allreduce-compare --ranks N` uses the first N GPUs; `--smoke` runs small sizes.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use headroom_alloc::AllocatorConfig;
use headroom_collectives::{Collective, NcclCollective, ReduceOp, UniqueId};
use headroom_kernels::{Array, DType, Device};

/// Timed calls per size after warm-ups; the median is reported.
const RUNS: usize = 20;

fn main() {
    if let Err(err) = run() {
        eprintln!("allreduce-compare: {err}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let ranks = match args.iter().position(|a| a == "--ranks") {
        Some(at) => args.get(at + 1).ok_or("--ranks needs a number")?.parse()?,
        None => headroom_kernels::cuda::device_count()?,
    };
    if ranks == 0 {
        return Err("no CUDA device".into());
    }
    let sizes: Vec<usize> = if smoke {
        vec![1 << 12, 1 << 16]
    } else {
        (20..=28).step_by(2).map(|p| 1usize << p).collect()
    };
    let id = UniqueId::new()?;
    let start = Arc::new(Barrier::new(ranks));
    let threads: Vec<_> = (0..ranks)
        .map(|rank| {
            let (sizes, start, id) = (sizes.clone(), Arc::clone(&start), id.clone());
            std::thread::spawn(move || rank_times(rank, ranks, &id, &sizes, &start))
        })
        .collect();
    let mut times = Vec::new();
    for thread in threads {
        let mine = thread.join().map_err(|_| "a rank's thread panicked")??;
        times.push(mine);
    }
    println!(
        "{:>12} {:>6} {:>12} {:>10} {:>10}",
        "bytes", "ranks", "seconds", "alg GB/s", "bus GB/s"
    );
    let mut lines = Vec::new();
    for (at, &bytes) in sizes.iter().enumerate() {
        // The slowest rank's median: a collective ends when every rank's part has.
        let seconds = times.iter().map(|t: &Vec<f64>| t[at]).fold(0.0, f64::max);
        let alg = bytes as f64 / seconds / 1e9;
        let bus = alg * 2.0 * (ranks - 1) as f64 / ranks as f64;
        println!("{bytes:>12} {ranks:>6} {seconds:>12.6} {alg:>10.2} {bus:>10.2}");
        lines.push(format!(
            r#"{{"op":"all_reduce","dtype":"f32","bytes":{bytes},"ranks":{ranks},"seconds":{seconds},"alg_gbps":{alg:.3},"bus_gbps":{bus:.3}}}"#
        ));
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}

/// Rank `rank`'s median seconds per all-reduce of each size.
fn rank_times(
    rank: usize,
    ranks: usize,
    id: &UniqueId,
    sizes: &[usize],
    start: &Barrier,
) -> Result<Vec<f64>, String> {
    let text = |err: &dyn std::fmt::Display| format!("rank {rank}: {err}");
    let device = Device::cuda(rank as u32, AllocatorConfig::default()).map_err(|e| text(&e))?;
    start.wait();
    let mut world = NcclCollective::new(&device, rank, ranks, id, Duration::from_secs(120))
        .map_err(|e| text(&e))?;
    let mut medians = Vec::with_capacity(sizes.len());
    for &bytes in sizes {
        let mut array = Array::zeros(&device, [bytes / 4], DType::F32).map_err(|e| text(&e))?;
        for _ in 0..3 {
            world
                .all_reduce(&mut array, ReduceOp::Sum)
                .map_err(|e| text(&e))?;
        }
        let mut runs = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let began = Instant::now();
            world
                .all_reduce(&mut array, ReduceOp::Sum)
                .map_err(|e| text(&e))?;
            runs.push(began.elapsed().as_secs_f64());
        }
        runs.sort_by(f64::total_cmp);
        medians.push(runs[RUNS / 2]);
    }
    world.finish().map_err(|e| text(&e))?;
    Ok(medians)
}
