//! How much of a training step the tape itself costs: the time of forward + backward steps,
//! against the time the device spent in kernels and allocations during them. Prints a table,
//! then one JSON line per model with the keys `model, step_ms, kernel_ms, tape_overhead`.

use std::time::Instant;

use headroom_benches::models::Workload;

/// Timed steps per model, after one warm-up step.
const STEPS: usize = 10;

fn main() -> headroom_nn::Result<()> {
    println!(
        "{:<36} {:>10} {:>10} {:>10}",
        "model", "step ms", "kernel ms", "overhead"
    );
    let mut lines = Vec::new();
    for workload in [Workload::mlp(), Workload::transformer_block()] {
        workload.step()?;
        let kernels_before = workload.device.kernel_time();
        let start = Instant::now();
        for _ in 0..STEPS {
            workload.step()?;
        }
        let wall = start.elapsed().as_secs_f64() / STEPS as f64;
        let busy =
            (workload.device.kernel_time().busy - kernels_before.busy).as_secs_f64() / STEPS as f64;
        let overhead = 1.0 - busy / wall;
        println!(
            "{:<36} {:>10.2} {:>10.2} {:>9.2}%",
            workload.name,
            wall * 1e3,
            busy * 1e3,
            overhead * 100.0
        );
        lines.push(format!(
            "{{\"model\":\"{}\",\"step_ms\":{:.3},\"kernel_ms\":{:.3},\"tape_overhead\":{:.4}}}",
            workload.name,
            wall * 1e3,
            busy * 1e3,
            overhead
        ));
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
