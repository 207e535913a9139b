//! Runs the same traces through headroom-alloc, offset-allocator and a first-fit list in one
//! process, and prints a table and one JSON line per (trace, allocator).
//!
//! `ns_per_op` is the median time of a whole warm replay (the allocators take turns, so they share
//! the machine's noise) divided by its allocations: nanoseconds per allocate + free pair. `peak_reserved_over_peak_in_use` divides the allocator's peak reserved
//! bytes by the peak of live requested bytes. `max_fit_scale` is the largest scale of the trace's
//! family (batch size for the transformer, size multiplier for log-normal) that replays without
//! an OOM at the family's fixed capacity.
//!
//! `alloc-compare --seeds N` then replays the log-normal family at scales 1 and 4 under N more
//! seeds and prints each allocator's mean `peak_reserved_over_peak_in_use` and how many seeds it
//! reserved no more than the best peer: one seed's figure swings by a tenth with the seed, and a
//! mean over many says which placement rule reserves less.

use headroom_alloc::trace::{TraceOp, TransformerTrace};
use headroom_benches::alloc_traces::{LOGNORMAL_CAPACITY, lognormal, lognormal_seed};
use headroom_benches::harness::{CompactTrace, Contender, Replay, contender, max_fit_scale, race};
use headroom_benches::peers::{FirstFit, Headroom, OffsetAllocator};

/// One family of traces at a fixed capacity.
struct Family {
    name: &'static str,
    capacity: u64,
    /// Scales to report in the table.
    scales: &'static [u64],
    /// Scales tried by the fit search.
    max_scale: u64,
    trace_at: fn(u64) -> Vec<TraceOp>,
    runs: usize,
}

fn transformer(batch: u64) -> Vec<TraceOp> {
    TransformerTrace::default().with_batch(batch).generate()
}

fn lognormal_at(scale: u64) -> Vec<TraceOp> {
    lognormal(scale, lognormal_seed())
}

const FAMILIES: [Family; 2] = [
    Family {
        name: "transformer",
        capacity: 1 << 30,
        scales: &[4, 16, 32],
        max_scale: 64,
        trace_at: transformer,
        runs: 101,
    },
    Family {
        name: "lognormal",
        capacity: LOGNORMAL_CAPACITY,
        scales: &[1, 4],
        max_scale: 32,
        trace_at: lognormal_at,
        runs: 11,
    },
];

struct Row {
    trace: String,
    allocator: &'static str,
    replay: Replay,
    allocs: usize,
    max_fit_scale: u64,
}

/// The allocators compared, each over `capacity` bytes, as contenders on `trace`.
fn contenders(trace: &CompactTrace, capacity: u64) -> Vec<Contender<'_>> {
    vec![
        contender(trace, Headroom::new(capacity)),
        contender(trace, Headroom::expandable(capacity)),
        contender(trace, OffsetAllocator::new(capacity)),
        contender(trace, FirstFit::new(capacity)),
    ]
}

/// Each allocator's `max_fit_scale` on `family`, in the order of [`contenders`].
fn fits(family: &Family) -> [u64; 4] {
    let (max, trace_at, capacity) = (family.max_scale, family.trace_at, family.capacity);
    [
        max_fit_scale(max, trace_at, || Headroom::new(capacity)),
        max_fit_scale(max, trace_at, || Headroom::expandable(capacity)),
        max_fit_scale(max, trace_at, || OffsetAllocator::new(capacity)),
        max_fit_scale(max, trace_at, || FirstFit::new(capacity)),
    ]
}

fn measure(family: &Family, rows: &mut Vec<Row>) {
    let fits = fits(family);
    for &scale in family.scales {
        let trace = CompactTrace::new(&(family.trace_at)(scale));
        let mut contenders = contenders(&trace, family.capacity);
        let replays = race(&mut contenders, family.runs);
        for ((contender, replay), fit) in contenders.iter().zip(replays).zip(fits) {
            rows.push(Row {
                trace: format!("{}-x{scale}", family.name),
                allocator: contender.name,
                replay,
                allocs: trace.allocs(),
                max_fit_scale: fit,
            });
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seeds = match args.as_slice() {
        [] => None,
        [flag, count] if flag == "--seeds" => match count.parse::<u64>() {
            Ok(count) if count > 0 => Some(count),
            _ => usage(),
        },
        _ => usage(),
    };
    let mut rows = Vec::new();
    for family in &FAMILIES {
        measure(family, &mut rows);
    }
    println!(
        "{:<16} {:<18} {:>10} {:>10} {:>14} {:>6} {:>8}",
        "trace", "allocator", "ns/pair", "vs offset", "reserved/live", "OOMs", "max fit"
    );
    for row in &rows {
        let offset = rows
            .iter()
            .find(|other| other.trace == row.trace && other.allocator == "offset-allocator")
            .map_or(f64::NAN, ns_per_op);
        println!(
            "{:<16} {:<18} {:>10.1} {:>10.2} {:>14.3} {:>6} {:>8}",
            row.trace,
            row.allocator,
            ns_per_op(row),
            ns_per_op(row) / offset,
            ratio(row),
            row.replay.ooms,
            row.max_fit_scale
        );
    }
    for row in &rows {
        let line = serde_json::json!({
            "trace": row.trace,
            "allocator": row.allocator,
            "ns_per_op": ns_per_op(row),
            "peak_reserved_over_peak_in_use": ratio(row),
            "ooms": row.replay.ooms,
            "max_fit_scale": row.max_fit_scale,
        });
        println!("{line}");
    }
    if let Some(seeds) = seeds {
        seed_sweep(seeds);
    }
}

fn usage() -> ! {
    eprintln!("usage: alloc-compare [--seeds N]   (N > 0: the log-normal reserved sweep)");
    std::process::exit(2);
}

/// The log-normal family's reserved over in use at scales 1 and 4 under `seeds` seeds: each
/// allocator's mean, and the seeds where it reserved no more than the best peer.
fn seed_sweep(seeds: u64) {
    println!();
    println!("log-normal reserved/live over {seeds} seeds (mean; seeds at or under the best peer)");
    println!(
        "{:<16} {:<18} {:>14} {:>14}",
        "trace", "allocator", "reserved/live", "<= best peer"
    );
    for scale in [1, 4] {
        let mut sums = [0.0; 4];
        let mut level = [0u64; 4];
        let mut names = [""; 4];
        for seed in 0..seeds {
            let trace = CompactTrace::new(&lognormal(scale, 1000 + seed));
            let contenders = contenders(&trace, LOGNORMAL_CAPACITY);
            let ratios: Vec<f64> = contenders.iter().map(|c| ratio_of(&c.cold)).collect();
            // The peers are the last two contenders.
            let best_peer = ratios[2].min(ratios[3]);
            for (index, (contender, ratio)) in contenders.iter().zip(&ratios).enumerate() {
                names[index] = contender.name;
                sums[index] += ratio;
                level[index] += u64::from(*ratio <= best_peer);
            }
        }
        for index in 0..4 {
            let mean = sums[index] / seeds as f64;
            let trace = format!("lognormal-x{scale}");
            println!(
                "{trace:<16} {:<18} {mean:>14.3} {:>14}",
                names[index], level[index]
            );
            let line = serde_json::json!({
                "trace": trace,
                "allocator": names[index],
                "seeds": seeds,
                "mean_peak_reserved_over_peak_in_use": mean,
                "seeds_at_or_under_best_peer": level[index],
            });
            println!("{line}");
        }
    }
}

fn ratio_of(replay: &Replay) -> f64 {
    replay.peak_reserved as f64 / replay.peak_live.max(1) as f64
}

fn ns_per_op(row: &Row) -> f64 {
    row.replay.nanos as f64 / row.allocs.max(1) as f64
}

fn ratio(row: &Row) -> f64 {
    ratio_of(&row.replay)
}
