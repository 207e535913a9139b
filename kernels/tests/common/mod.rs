//! Shared test machinery: devices, seeded random inputs, f64 references and tolerances.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use headroom_alloc::AllocatorConfig;
use headroom_alloc::trace::SplitMix64;
use headroom_kernels::{Array, DType, Device, DeviceConfig, Error, Result, Shape};

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

// ---------- row ops (softmax, layer normalization) ----------

/// Shapes every row op (softmax, layer normalization) is checked on: single elements, one row, rows of length 1, batches, more
/// rows than the layer-norm backward has partial sums (64), rows past 1024 (a thread block per
/// row on CUDA, a warp per row below), more rows than one pass of a GPU's grid covers, with short
/// rows and with long ones. CUDA builds its row kernels in several shapes (threads to a row,
/// elements each keeps in registers; `cuda/rows.rs`): the lengths take each, forward (rows
/// up to 256, 512, 1024 for a warp, 2048, 4096 for a block of 256, 8192, 16384 for one of 512)
/// and backward (128, 256, 512; 1024, 2048, 4096; 8192), and rows past them all (read again for
/// each pass), of whole 16-byte packs (multiples of 8: loaded as packs by softmax) and of odd
/// lengths.
pub const ROW_SHAPES: [&[usize]; 17] = [
    &[1],
    &[7],
    &[3, 5],
    &[2, 1, 9],
    &[4, 1],
    &[130, 7],
    &[2, 200],
    &[2, 300],
    &[1, 1, 1],
    &[2, 1000],
    &[3, 1500],
    &[2, 3000],
    &[2, 6000],
    &[20000, 3],
    &[2200, 1030],
    &[2, 9000],
    &[2, 17000],
];

/// `(rows, len)` of a shape, normalized over its last axis.
pub fn rows_len(shape: &[usize]) -> (usize, usize) {
    let (len, rest) = shape.split_last().expect("rank >= 1");
    (rest.iter().product(), *len)
}

// ---------- finite differences on F64 ----------

/// The step of [`numeric_gradient`].
const H: f64 = 1e-6;
/// The relative tolerance of a gradient against finite differences, in f64.
pub const FD_TOLERANCE: f64 = 1e-6;

/// Central differences of `loss` at `at`, one element at a time.
pub fn numeric_gradient(at: &[f64], loss: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let mut point = at.to_vec();
    (0..at.len())
        .map(|i| {
            point[i] = at[i] + H;
            let up = loss(&point);
            point[i] = at[i] - H;
            let down = loss(&point);
            point[i] = at[i];
            (up - down) / (2.0 * H)
        })
        .collect()
}

/// The dot product of two vectors.
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

// ---------- errors ----------

/// Asserts `result` failed naming `op` and, in its message, every string of `mentions`.
pub fn assert_fails<T>(result: Result<T>, op: &str, mentions: &[&str]) -> Error {
    let Err(err) = result else {
        panic!("{op}: expected an error")
    };
    let text = err.to_string();
    assert!(text.starts_with(op), "{op}: {text}");
    for m in mentions {
        assert!(text.contains(m), "{op}: {text} does not mention {m}");
    }
    err
}

// ---------- ids (embedding, cross-entropy) ----------

/// Random ids in `0..limit` of `shape`, uploaded as U32, and their values.
pub fn random_ids(
    device: &Device,
    rng: &mut SplitMix64,
    shape: &[usize],
    limit: usize,
) -> (Array, Vec<u32>) {
    let n: usize = shape.iter().product();
    let ids: Vec<u32> = (0..n)
        .map(|_| (rng.next_u64() % limit as u64) as u32)
        .collect();
    (Array::from_host(device, shape, &ids).unwrap(), ids)
}

/// Leaves stale nonzero data in freed memory, so that an output that is not fully written (a
/// gradient table not zeroed, say) shows.
pub fn dirty(device: &Device, dtype: DType, n: usize) {
    drop(Array::full(device, [n.max(1)], dtype, 7.25).unwrap());
}

/// `assert_fails_leaking_nothing!(device; call => Kind(op, words...))`: asserts that `call` fails with
/// `Error::Kind` naming `op` (its text containing each of `words`), and leaves the device's
/// memory in use as it was.
#[allow(unused_macros)]
macro_rules! assert_fails_leaking_nothing {
    ($device:expr; $call:expr => $kind:ident($op:expr $(, $word:expr)*)) => {{
        let in_use = $device.allocator().stats().in_use;
        let err = $call.expect_err(stringify!($call));
        let named = matches!(&err, Error::$kind { op, .. } if *op == $op);
        assert!(named, "{}: {err:?}", stringify!($call));
        $(assert!(err.to_string().contains($word), "{err}");)*
        assert_eq!($device.allocator().stats().in_use, in_use, "{err}: leaked");
    }};
}
