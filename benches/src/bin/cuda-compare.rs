//! The CUDA backend on a GPU: GEMM throughput by dtype, elementwise, softmax and layer-norm
//! bandwidth as a share of the device's copy bandwidth, the gradient of an embedding for
//! spread and skewed ids, and alloc + free through the device's allocator (and
//! as device buffers) against the driver's cuMemAlloc + cuMemFree of the same sizes. Prints a
//! table, then one JSON line per result with the keys `op, dtype, shape, value, unit` (and
//! `of_copy` or `speedup` where they apply); `benches/peers/torch_cuda.py` prints the same keys
//! for PyTorch.
//!
//! `cuda-compare --smoke` runs every case at a small size: figures that mean nothing, from a run
//! quick enough for the CPU emulation of the driver (`tools/cuda-emulator`), to check that the
//! bench runs before GPU time is spent on it.

use std::time::Instant;

use headroom_alloc::trace::SplitMix64;
use headroom_alloc::{AllocatorConfig, Limit, Tag};
use headroom_benches::token_ids::embedding_cases;
use headroom_kernels::cuda::CudaOptions;
use headroom_kernels::ops::elementwise::{self as ew, BinaryOp, UnaryOp};
use headroom_kernels::ops::gemm::matmul;
use headroom_kernels::ops::index::embedding_backward;
use headroom_kernels::ops::norm::layer_norm;
use headroom_kernels::ops::softmax::{softmax, softmax_backward};
use headroom_kernels::{Array, DType, Device, Error, Result};

/// Timed runs per case after warm-ups; the median is reported.
const RUNS: usize = 10;

/// The sizes of a run.
struct Scale {
    /// Square GEMM sizes.
    gemm: &'static [usize],
    /// f32 elements of the bandwidth cases' arrays.
    elements: usize,
    /// Timed alloc + free rounds.
    alloc_rounds: usize,
    /// The embedding gradient's positions, row length and large vocabulary.
    embedding: (usize, usize, usize),
}

/// The sizes the figures are measured at.
const FULL: Scale = Scale {
    gemm: &[4096, 8192],
    elements: 1 << 28,
    alloc_rounds: 2000,
    embedding: (8 * 2048, 768, 50257),
};

/// `--smoke`: every case, small.
const SMOKE: Scale = Scale {
    gemm: &[96],
    elements: 1 << 14,
    alloc_rounds: 4,
    embedding: (256, 8, 1000),
};

/// Median seconds of `RUNS` runs of `work`, each waited for on the device.
fn time(device: &Device, mut work: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..3 {
        work()?;
    }
    device.synchronize()?;
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let start = Instant::now();
        work()?;
        device.synchronize()?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[RUNS / 2])
}

fn line(op: &str, dtype: &str, shape: &str, value: f64, unit: &str, extra: &str) -> String {
    println!("{op:<18} {dtype:<10} {shape:>30} {value:>12.2} {unit:<8} {extra}");
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(",{extra}")
    };
    format!(
        "{{\"op\":\"{op}\",\"dtype\":\"{dtype}\",\"shape\":\"{shape}\",\"value\":{value:.3},\"unit\":\"{unit}\"{extra}}}"
    )
}

fn gemms(scale: &Scale, lines: &mut Vec<String>) -> Result<()> {
    let plain = Device::cuda(0, AllocatorConfig::default())?;
    let tf32 = Device::cuda_with(
        0,
        AllocatorConfig::default(),
        CudaOptions {
            tf32: true,
            ..CudaOptions::default()
        },
    )?;
    // Uniform in [-1, 1), as the peer's operands are: tensor cores draw power, and so run at
    // clocks, that depend on the data.
    let mut rng = SplitMix64::new(8192);
    for &size in scale.gemm {
        for (device, dtype, name) in [
            (&plain, DType::BF16, "bf16"),
            (&plain, DType::F16, "f16"),
            (&tf32, DType::F32, "tf32"),
            (&plain, DType::F32, "f32"),
        ] {
            let mut uniform = || -> Vec<f64> {
                (0..size * size)
                    .map(|_| 2.0 * rng.next_f64() - 1.0)
                    .collect()
            };
            let a = Array::from_f64(device, [size, size], dtype, &uniform())?;
            let b = Array::from_f64(device, [size, size], dtype, &uniform())?;
            let seconds = time(device, || matmul(&a, &b, false, false).map(drop))?;
            let tflops = 2.0 * (size as f64).powi(3) / seconds / 1e12;
            let shape = format!("{size}x{size}x{size}");
            lines.push(line("gemm", name, &shape, tflops, "TFLOP/s", ""));
        }
    }
    Ok(())
}

fn bandwidth(scale: &Scale, lines: &mut Vec<String>) -> Result<()> {
    let device = Device::cuda(
        0,
        AllocatorConfig::default().with_limit(Limit::Fraction(0.9)),
    )?;
    let n = scale.elements;
    let x = Array::zeros(&device, [n], DType::F32)?;
    let y = Array::zeros(&device, [n], DType::F32)?;
    let bytes = (n * 4) as f64;
    // Bytes moved, read and written, per second.
    let gbps = |moved: f64, seconds: f64| moved / seconds / 1e9;
    let copy = gbps(2.0 * bytes, time(&device, || x.deep_copy().map(drop))?);
    lines.push(line("copy", "f32", &n.to_string(), copy, "GB/s", ""));
    let share = |value: f64| format!("\"of_copy\":{:.3}", value / copy);
    for (name, op) in [("exp", UnaryOp::Exp), ("gelu", UnaryOp::Gelu)] {
        let v = gbps(2.0 * bytes, time(&device, || ew::unary(op, &x).map(drop))?);
        lines.push(line(name, "f32", &n.to_string(), v, "GB/s", &share(v)));
    }
    for (name, op) in [
        ("add", BinaryOp::Add),
        ("gelu_backward", BinaryOp::GeluBackward),
    ] {
        let v = gbps(
            3.0 * bytes,
            time(&device, || ew::binary(op, &x, &y).map(drop))?,
        );
        lines.push(line(name, "f32", &n.to_string(), v, "GB/s", &share(v)));
    }
    // Row ops at two lengths, both short enough for each kernel to hold a row in registers:
    // bytes of the rows read and written (layer normalization's per-row statistics and its
    // shared gamma and beta add under 0.1%).
    for len in [1024usize, 4096] {
        let rows = n / len;
        let shape = format!("{rows}x{len}");
        let (xs, dys) = (x.reshape([rows, len])?, y.reshape([rows, len])?);
        let gamma = Array::full(&device, [len], DType::F32, 1.0)?;
        let beta = Array::zeros(&device, [len], DType::F32)?;
        let mut row_case = |name: &str, arrays: f64, op: &dyn Fn() -> Result<()>| {
            let v = gbps(arrays * bytes, time(&device, op)?);
            lines.push(line(name, "f32", &shape, v, "GB/s", &share(v)));
            Ok::<_, Error>(())
        };
        row_case("softmax", 2.0, &|| softmax(&xs).map(drop))?;
        row_case("softmax_backward", 3.0, &|| {
            softmax_backward(&xs, &dys).map(drop)
        })?;
        row_case("layer_norm", 2.0, &|| {
            layer_norm(&xs, &gamma, &beta, 1e-5).map(drop)
        })?;
    }
    Ok(())
}

/// The gradient of an embedding (`dy` read, the table written, in GB/s) for the ids of
/// `embedding-backward`: spread over a large vocabulary (GPT-2's), and one id taking 90% of the
/// positions of a 16-row table; compared with PyTorch's, there being no target.
fn embeddings(scale: &Scale, lines: &mut Vec<String>) -> Result<()> {
    let device = Device::cuda(0, AllocatorConfig::default())?;
    let (positions, dim, large) = scale.embedding;
    let values: Vec<f64> = (0..positions * dim)
        .map(|i| (i % 1000) as f64 / 1000.0 - 0.5)
        .collect();
    let dy = Array::from_f64(&device, [positions, dim], DType::F32, &values)?;
    for (spread, vocab) in embedding_cases(large) {
        let ids = Array::from_host(&device, [positions], &spread.draw(positions, vocab))?;
        let seconds = time(&device, || embedding_backward(&ids, &dy, vocab).map(drop))?;
        let gbps = ((positions + vocab) * dim * 4) as f64 / seconds / 1e9;
        let shape = format!("{positions}x{dim} into {vocab} {}", spread.name());
        lines.push(line("embedding_backward", "f32", &shape, gbps, "GB/s", ""));
    }
    Ok(())
}

/// Sizes an allocation-heavy step asks for: activations, weights, small temporaries.
const SIZES: [usize; 8] = [
    256,
    4 << 10,
    64 << 10,
    1 << 20,
    3 << 20,
    16 << 20,
    512,
    48 << 10,
];

/// Seconds per alloc + free pair of `round`, which allocates [`SIZES`] and frees them, after
/// one untimed round (an allocator's first reserves its regions, the driver's first maps its
/// own pools).
fn per_pair(rounds: usize, mut round: impl FnMut() -> Result<()>) -> Result<f64> {
    round()?;
    let start = Instant::now();
    for _ in 0..rounds {
        round()?;
    }
    Ok(start.elapsed().as_secs_f64() / (rounds * SIZES.len()) as f64)
}

/// The device allocator's alloc + free (the target: at least 100 times the driver's), and a
/// device buffer's (the allocator, plus the buffer's tag and the device's call timing), each
/// against cuMemAlloc + cuMemFree of the same sizes.
fn allocations(scale: &Scale, lines: &mut Vec<String>) -> Result<()> {
    use cudarc::driver::{CudaContext, result};
    let device = Device::cuda(0, AllocatorConfig::default())?;
    let allocator = device.allocator();
    let rounds = scale.alloc_rounds;
    let ours = per_pair(rounds, || {
        let held: Vec<_> = SIZES
            .iter()
            .map(|&bytes| allocator.allocate(bytes as u64, Tag::ACTIVATIONS))
            .collect::<std::result::Result<_, _>>()
            .map_err(|err| Error::from_alloc("bench", err))?;
        drop(held);
        Ok(())
    })?;
    let buffers = per_pair(rounds, || {
        let held: Vec<_> = SIZES
            .iter()
            .map(|&bytes| device.alloc(DType::F32, bytes / 4, "bench"))
            .collect::<Result<_>>()?;
        drop(held);
        Ok(())
    })?;
    let context = CudaContext::new(0).expect("a CUDA context");
    context.bind_to_thread().expect("the context bound");
    let driver = per_pair(rounds, || {
        let held: Vec<u64> = SIZES
            .iter()
            // SAFETY: plain cuMemAlloc with the context current; each pointer is freed below.
            .map(|&bytes| unsafe { result::malloc_sync(bytes) }.expect("cuMemAlloc"))
            .collect();
        for ptr in held {
            // SAFETY: `ptr` came from cuMemAlloc above and nothing uses it.
            unsafe { result::free_sync(ptr) }.expect("cuMemFree");
        }
        Ok(())
    })?;
    for (op, seconds) in [("alloc_free", ours), ("buffer_alloc_free", buffers)] {
        let extra = format!(
            "\"driver_ns\":{:.1},\"speedup\":{:.1}",
            driver * 1e9,
            driver / seconds
        );
        lines.push(line(op, "bytes", "8 sizes", seconds * 1e9, "ns", &extra));
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let scale = match args.as_slice() {
        [] => &FULL,
        [flag] if flag == "--smoke" => &SMOKE,
        _ => {
            eprintln!("usage: cuda-compare [--smoke]");
            std::process::exit(2);
        }
    };
    println!(
        "{:<18} {:<10} {:>30} {:>12} unit",
        "op", "dtype", "shape", "value"
    );
    let mut lines = Vec::new();
    gemms(scale, &mut lines)?;
    bandwidth(scale, &mut lines)?;
    embeddings(scale, &mut lines)?;
    allocations(scale, &mut lines)?;
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
