//! f32 GEMM throughput of headroom-kernels' CPU backend: square sizes and the linear layers of a
//! GPT block. Prints a table, then one JSON line per result with the keys
//! `op, dtype, shape, gflops`; `benches/peers/torch_gemm.py` prints the same for PyTorch.

use std::time::Instant;

use headroom_kernels::ops::gemm::matmul;
use headroom_kernels::{Array, Device, DeviceConfig};

/// Runs per shape after one warm-up; the median is reported.
const RUNS: usize = 5;

/// (name, m, k, n): square sizes, then a GPT-2-small block at 8 x 128 tokens.
const SHAPES: [(&str, usize, usize, usize); 8] = [
    ("square", 256, 256, 256),
    ("square", 512, 512, 512),
    ("square", 1024, 1024, 1024),
    ("square", 2048, 2048, 2048),
    ("gpt qkv", 1024, 768, 2304),
    ("gpt proj", 1024, 768, 768),
    ("gpt mlp up", 1024, 768, 3072),
    ("gpt mlp down", 1024, 3072, 768),
];

fn main() -> Result<(), headroom_kernels::Error> {
    let device = Device::cpu(DeviceConfig::new(2 << 30))?;
    println!(
        "{:<14} {:>20} {:>10} {:>10}",
        "layer", "m x k x n", "ms", "GFLOP/s"
    );
    let mut lines = Vec::new();
    for (name, m, k, n) in SHAPES {
        let a_data: Vec<f32> = (0..m * k)
            .map(|i| ((i % 97) as f32 - 48.0) / 64.0)
            .collect();
        let b_data: Vec<f32> = (0..k * n)
            .map(|i| ((i % 89) as f32 - 44.0) / 64.0)
            .collect();
        let a = Array::from_host(&device, [m, k], &a_data)?;
        let b = Array::from_host(&device, [k, n], &b_data)?;
        drop(matmul(&a, &b, false, false)?);
        let mut times: Vec<f64> = (0..RUNS)
            .map(|_| {
                let start = Instant::now();
                let c = matmul(&a, &b, false, false);
                let seconds = start.elapsed().as_secs_f64();
                c.map(|_| seconds)
            })
            .collect::<Result<_, _>>()?;
        times.sort_by(f64::total_cmp);
        let seconds = times[RUNS / 2];
        let gflops = 2.0 * (m * k * n) as f64 / seconds / 1e9;
        let shape = format!("{m}x{k}x{n}");
        println!(
            "{name:<14} {shape:>20} {:>10.2} {gflops:>10.1}",
            seconds * 1e3
        );
        lines.push(format!(
            "{{\"op\":\"gemm\",\"dtype\":\"f32\",\"shape\":\"{shape}\",\"gflops\":{gflops:.2}}}"
        ));
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
