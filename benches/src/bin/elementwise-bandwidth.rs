//! Elementwise throughput of headroom-kernels' CPU backend against the machine's memory
//! bandwidth, measured in the same run with a parallel copy of host memory. Prints a table, then
//! one JSON line per op with the keys `op, dtype, elements, gbps, fraction_of_copy`.

use headroom_benches::timing::{host_copy_gbps, median_seconds};
use headroom_kernels::ops::elementwise as ew;
use headroom_kernels::{Array, DType, Device, DeviceConfig, Result};

/// Elements per operand: 64 MiB of f32, far past every cache.
const ELEMENTS: usize = 16 << 20;
/// Runs per op after a warm-up; the median is reported.
const RUNS: usize = 7;

fn main() -> Result<()> {
    let device = Device::cpu(DeviceConfig::new(2 << 30))?;
    let data: Vec<f32> = (0..ELEMENTS)
        .map(|i| 0.5 + (i % 1000) as f32 / 1000.0)
        .collect();
    let a = Array::from_host(&device, [ELEMENTS], &data)?;
    let b = Array::from_host(&device, [ELEMENTS], &data)?;
    let copy_gbps = host_copy_gbps(ELEMENTS, RUNS);
    let bytes = (ELEMENTS * 4) as f64;

    // (name, operands read, the op)
    type Op<'a> = Box<dyn Fn() -> Result<Array> + 'a>;
    let ops: Vec<(&str, f64, Op)> = vec![
        ("copy", 1.0, Box::new(|| a.deep_copy())),
        ("add", 2.0, Box::new(|| ew::add(&a, &b))),
        ("mul", 2.0, Box::new(|| ew::mul(&a, &b))),
        ("scale", 1.0, Box::new(|| ew::scale(&a, 0.5))),
        ("relu", 1.0, Box::new(|| ew::relu(&a))),
        ("exp", 1.0, Box::new(|| ew::exp(&a))),
        ("gelu", 1.0, Box::new(|| ew::gelu(&a))),
        ("gelu_backward", 2.0, Box::new(|| ew::gelu_backward(&a, &b))),
    ];
    println!("memory bandwidth (parallel host copy): {copy_gbps:.1} GB/s");
    println!("{:<14} {:>10} {:>10} {:>10}", "op", "ms", "GB/s", "of copy");
    let mut lines = Vec::new();
    for (name, reads, op) in &ops {
        let seconds = median_seconds(RUNS, || op().map(drop))?;
        let gbps = (reads + 1.0) * bytes / seconds / 1e9;
        let fraction = gbps / copy_gbps;
        println!(
            "{name:<14} {:>10.2} {gbps:>10.1} {fraction:>10.2}",
            seconds * 1e3
        );
        lines.push(format!(
            "{{\"op\":\"{name}\",\"dtype\":\"{}\",\"elements\":{ELEMENTS},\"gbps\":{gbps:.2},\"fraction_of_copy\":{fraction:.3}}}",
            DType::F32
        ));
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
