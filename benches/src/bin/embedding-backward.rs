//! The gradient of an embedding (the scatter-add of `dy`'s rows into a table) on headroom-kernels'
//! CPU backend, for 8 sequences of 2048 tokens with rows of 768 (GPT-2's width), f32:
//!
//! - `gpt2-uniform`, `gpt2-zipf`, `gpt2-one-id`: GPT-2's table (50257 rows), ids uniform over
//!   it, Zipf-distributed as words in text are (the most frequent id about 9% of positions), or
//!   one id everywhere (a padding token);
//! - `small-skewed`: a table of 16 rows (a character or digit vocabulary) where one id takes
//!   90% of the positions.
//!
//! Each case runs on every thread and on one: one frequent id must not leave the other threads
//! idle. Prints a table, then one JSON line per case with the keys `op, ids, dtype, positions,
//! vocab, dim, threads, ms, ms_one_thread, parallel_speedup, gbps, fraction_of_copy`; GB/s
//! counts `dy` read and the table written, against a parallel copy of host memory measured in
//! the same run.

use headroom_benches::timing::{host_copy_gbps, median_seconds};
use headroom_benches::token_ids::{SMALL_TABLE, embedding_cases};
use headroom_kernels::ops::index::embedding_backward;
use headroom_kernels::{Array, DType, Device, DeviceConfig, Result};

const GPT2_VOCAB: usize = 50257;
const DIM: usize = 768;
const POSITIONS: usize = 8 * 2048;
/// Runs per case after a warm-up; the median is reported.
const RUNS: usize = 7;

fn main() -> Result<()> {
    let device = Device::cpu(DeviceConfig::new(2 << 30))?;
    let values: Vec<f32> = (0..POSITIONS * DIM)
        .map(|i| (i % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let dy = Array::from_host(&device, [POSITIONS, DIM], &values)?;
    let copy_gbps = host_copy_gbps(GPT2_VOCAB * DIM, RUNS);
    let threads = rayon::current_num_threads();
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a one-thread pool");
    println!("memory bandwidth (parallel host copy): {copy_gbps:.1} GB/s");
    println!(
        "{:<14} {:>10} {:>14} {:>8} {:>8} {:>8}",
        "ids",
        format!("ms ({threads}t)"),
        "ms (1 thread)",
        "speedup",
        "GB/s",
        "of copy"
    );
    let mut lines = Vec::new();
    for (spread, vocab) in embedding_cases(GPT2_VOCAB) {
        let table = if vocab == SMALL_TABLE {
            "small"
        } else {
            "gpt2"
        };
        let case = format!("{table}-{}", spread.name());
        let ids = Array::from_host(&device, [POSITIONS], &spread.draw(POSITIONS, vocab))?;
        let run = || median_seconds(RUNS, || embedding_backward(&ids, &dy, vocab).map(drop));
        let seconds = run()?;
        let alone = one_thread.install(run)?;
        let speedup = alone / seconds;
        // dy read, the table written.
        let gbps = ((POSITIONS + vocab) * DIM * 4) as f64 / seconds / 1e9;
        let fraction = gbps / copy_gbps;
        println!(
            "{case:<14} {:>10.2} {:>14.2} {speedup:>8.2} {gbps:>8.1} {fraction:>8.2}",
            seconds * 1e3,
            alone * 1e3
        );
        lines.push(format!(
            "{{\"op\":\"embedding_backward\",\"ids\":\"{case}\",\"dtype\":\"{}\",\"positions\":{POSITIONS},\"vocab\":{vocab},\"dim\":{DIM},\"threads\":{threads},\"ms\":{:.3},\"ms_one_thread\":{:.3},\"parallel_speedup\":{speedup:.3},\"gbps\":{gbps:.2},\"fraction_of_copy\":{fraction:.3}}}",
            DType::F32,
            seconds * 1e3,
            alone * 1e3
        ));
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
