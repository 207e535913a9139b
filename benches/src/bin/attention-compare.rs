//! Causal attention's forward and backward passes on headroom-kernels' CPU backend, at GPT-2
//! small's shapes: 12 heads of 64 features over 1024 positions, batches of 1 and 4, f32 (and
//! bf16). It times [`attention`] and [`attention_backward`] (FlashAttention-2), and the two
//! together, as `benches/peers/torch_attention.py` times PyTorch's
//! `scaled_dot_product_attention` forward and backward.
//!
//! Prints a table, then one JSON line per case with the keys `op, dtype, shape, ms, gflops`
//! (`shape` is `BxHxTxD`; GFLOP/s counts the causal products only: `2 B H T^2 D` forward,
//! twice that backward).

use headroom_benches::timing::median_seconds;
use headroom_kernels::ops::attention::{Attention, attention, attention_backward};
use headroom_kernels::{Array, DType, Device, DeviceConfig, Result};

const HEADS: usize = 12;
const LEN: usize = 1024;
const HEAD: usize = 64;
/// Runs per case after a warm-up; the median is reported.
const RUNS: usize = 5;

fn main() -> Result<()> {
    let device = Device::cpu(DeviceConfig::new(8 << 30))?;
    let how = Attention {
        scale: 1.0 / (HEAD as f64).sqrt(),
        causal: true,
        window: None,
        dropout: None,
    };
    println!(
        "{:<20} {:>6} {:>16} {:>10} {:>8}",
        "op", "dtype", "shape", "ms", "GFLOP/s"
    );
    let mut lines = Vec::new();
    for dtype in [DType::F32, DType::BF16] {
        for batch in [1, 4] {
            let shape = [batch, HEADS, LEN, HEAD];
            let n: usize = shape.iter().product();
            let values = |seed: usize| -> Vec<f64> {
                (0..n)
                    .map(|i| ((i * 7919 + seed) % 2000) as f64 / 1000.0 - 1.0)
                    .collect()
            };
            let array = |seed| Array::from_f64(&device, shape, dtype, &values(seed));
            let (q, k, v, g) = (array(1)?, array(2)?, array(3)?, array(4)?);
            let (out, lse) = attention(&q, &k, &v, how)?;
            let forward = median_seconds(RUNS, || attention(&q, &k, &v, how).map(drop))?;
            let backward = median_seconds(RUNS, || {
                attention_backward((&q, &k, &v), (&out, &lse), &g, how).map(drop)
            })?;
            // Causal products: q k^T and the weights times v, half of each.
            let flops = (2 * batch * HEADS * LEN * LEN * HEAD) as f64;
            let shape = format!("{batch}x{HEADS}x{LEN}x{HEAD}");
            for (op, seconds, work) in [
                ("attention", forward, flops),
                ("attention_backward", backward, 2.0 * flops),
                ("attention_fwd_bwd", forward + backward, 3.0 * flops),
            ] {
                let gflops = work / seconds / 1e9;
                println!(
                    "{op:<20} {:>6} {shape:>16} {:>10.2} {gflops:>8.1}",
                    dtype.to_string(),
                    seconds * 1e3
                );
                lines.push(format!(
                    "{{\"op\":\"{op}\",\"dtype\":\"{dtype}\",\"shape\":\"{shape}\",\"ms\":{:.3},\"gflops\":{gflops:.2}}}",
                    seconds * 1e3
                ));
            }
        }
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
