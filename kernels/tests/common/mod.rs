//! Shared test machinery: devices, seeded random inputs, f64 references and tolerances.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use headroom_alloc::AllocatorConfig;
use headroom_alloc::trace::SplitMix64;
use headroom_kernels::{Array, DType, Device, DeviceConfig, Shape};

/// Every backend present: the CPU always; CUDA when built with it and a GPU is there (each
/// test says which ran, and why CUDA was skipped).
pub fn devices() -> Vec<Device> {
    let config = DeviceConfig::new(256 << 20).with_allocator(AllocatorConfig::default());
    let mut devices = vec![Device::cpu(config).expect("a CPU device")];
    match cuda() {
        Ok(device) => devices.push(device),
        Err(why) => cuda_skipped(&why),
    }
    let names: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
    eprintln!("backends: {}", names.join(", "));
    devices
}

/// Says why a CUDA check did not run; fails instead where `HEADROOM_REQUIRE_CUDA` is set (as
/// `scripts/gpu-check.sh run` sets it), so that a run on a GPU machine cannot pass on the CPU
/// alone.
pub fn cuda_skipped(why: &str) {
    if std::env::var_os("HEADROOM_REQUIRE_CUDA").is_some() {
        panic!("HEADROOM_REQUIRE_CUDA is set, and CUDA did not run: {why}");
    }
    eprintln!("cuda skipped: {why}");
}

/// CUDA device 0 under a 256 MiB limit, or why there is none.
#[cfg(feature = "cuda")]
pub fn cuda() -> Result<Device, String> {
    let config = AllocatorConfig::default().with_limit_bytes(256 << 20);
    Device::cuda(0, config).map_err(|err| err.to_string())
}

/// CUDA device 0 under a 256 MiB limit, or why there is none.
#[cfg(not(feature = "cuda"))]
pub fn cuda() -> Result<Device, String> {
    Err("headroom-kernels was built without the `cuda` feature".into())
}

/// A generator seeded from `HEADROOM_SEED` or the clock, printed so that a failure can be
/// replayed; each call gets a distinct stream.
pub fn rng() -> SplitMix64 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let base = std::env::var("HEADROOM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let seed = base.wrapping_add(CALLS.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37));
    eprintln!("seed {seed} (replay with HEADROOM_SEED={seed})");
    SplitMix64::new(seed)
}

/// Random values in `[lo, hi)`, never exactly zero.
pub fn values(rng: &mut SplitMix64, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let v = lo + (hi - lo) * rng.next_f64();
            if v == 0.0 { 0.5 } else { v }
        })
        .collect()
}

/// A random `[rows, len]` array of `dtype` in `[lo, hi)`, and its values as stored, minus
/// infinity where a mask leaves nothing (attention masks, masked vocabularies): every third
/// element, and the last quarter of each run of 32 and of 256 lanes, so that on a GPU some
/// threads of a warp, and of a block, see nothing but masked elements. Element 1 of each row is
/// never masked.
pub fn masked(
    device: &Device,
    rng: &mut SplitMix64,
    [rows, len]: [usize; 2],
    dtype: DType,
    lo: f64,
    hi: f64,
) -> (Array, Vec<f64>) {
    let mut data = values(rng, rows * len, lo, hi);
    for (i, v) in data.iter_mut().enumerate() {
        let j = i % len;
        if j % 3 == 0 || j % 32 >= 24 || j % 256 >= 192 {
            *v = f64::NEG_INFINITY;
        }
    }
    let array = Array::from_f64(device, [rows, len], dtype, &data).unwrap();
    let stored = array.to_f64().unwrap();
    (array, stored)
}

/// A random array of `dtype`, and its values as stored (already rounded to the dtype).
pub fn random(
    device: &Device,
    rng: &mut SplitMix64,
    shape: &[usize],
    dtype: DType,
    lo: f64,
    hi: f64,
) -> (Array, Vec<f64>) {
    let data = values(rng, Shape::new(shape).numel(), lo, hi);
    let array = Array::from_f64(device, Shape::new(shape), dtype, &data).unwrap();
    let stored = array.to_f64().unwrap();
    (array, stored)
}

/// Relative tolerance of a dtype's results.
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        DType::F16 => 2e-3,
        DType::BF16 => 1e-2,
        _ => 0.0,
    }
}

/// Asserts `got` matches `want` within `rtol` relative to `scale[i]` (the magnitude the result
/// is computed from; `|want|` for most ops), with an absolute floor of `rtol`.
pub fn assert_close_scaled(what: &str, got: &[f64], want: &[f64], scale: &[f64], rtol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, ((&g, &w), &s)) in got.iter().zip(want).zip(scale).enumerate() {
        let bound = rtol * s.abs().max(1.0);
        assert!(
            (g - w).abs() <= bound || (g.is_nan() && w.is_nan()),
            "{what}: element {i} is {g}, want {w} (tolerance {bound})"
        );
    }
}

/// Asserts `got` matches `want` within `rtol` relative to `|want|` (floor 1).
pub fn assert_close(what: &str, got: &[f64], want: &[f64], rtol: f64) {
    assert_close_scaled(what, got, want, want, rtol);
}

/// The element of `values` (of `shape`) that index `index` of `out`, a shape `shape` broadcasts
/// to, reads.
pub fn broadcast_at(values: &[f64], shape: &Shape, out: &Shape, index: usize) -> f64 {
    let strides = shape.broadcast_strides(out);
    let mut rest = index;
    let mut offset = 0;
    for (axis, &dim) in out.dims().iter().enumerate().rev() {
        offset += (rest % dim) * strides[axis];
        rest /= dim;
    }
    values[offset]
}
