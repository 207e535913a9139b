//! The rates the planner prices a step's kernels at: fixed per kind of device by default, so
//! that plans are the same on every machine, or this machine's own, measured once by
//! `headroom plan --calibrate` and kept in a cache file that runs read under
//! `memory.rates = "calibrated"`.
//!
//! Calibration times the kernels the rates stand for on the run's device, each the median of
//! a few runs after a warm-up: an f32 and a bf16 matrix product of 1024 x 1024 x 1024, an
//! exponential over 16 Mi elements (the vector rate), a sum of two 64 MiB arrays (the memory
//! rate), a hundred additions of 256 elements (a kernel's fixed cost) and a copy of 64 MiB to
//! a second pool of host memory and back (the host tier's transfer rate).

use std::path::{Path, PathBuf};
use std::time::Instant;

use headroom_kernels::ops::elementwise::{add, exp};
use headroom_kernels::ops::gemm::matmul;
use headroom_kernels::{Array, DType, Device, DeviceConfig, PlanTarget, Rates};
use serde::{Deserialize, Serialize};

use crate::config::RatesKind;
use crate::error::{Error, Result};

/// The rates as the cache file keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Cached {
    matrix_flops: f64,
    half_matrix_flops: f64,
    vector_flops: f64,
    bytes: f64,
    launch: f64,
    /// Bytes per second between the device and its host tier (a cache written before it was
    /// measured is refused, asking for `--calibrate` again).
    transfer: f64,
}

impl From<Rates> for Cached {
    fn from(r: Rates) -> Self {
        Self {
            matrix_flops: r.matrix_flops,
            half_matrix_flops: r.half_matrix_flops,
            vector_flops: r.vector_flops,
            bytes: r.bytes,
            launch: r.launch,
            transfer: r.transfer,
        }
    }
}

impl From<Cached> for Rates {
    fn from(c: Cached) -> Self {
        Self {
            matrix_flops: c.matrix_flops,
            half_matrix_flops: c.half_matrix_flops,
            vector_flops: c.vector_flops,
            bytes: c.bytes,
            launch: c.launch,
            transfer: c.transfer,
        }
    }
}

/// The user's cache directory: `$XDG_CACHE_HOME`, or `~/.cache`.
fn cache_base() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
}

/// The cache file of a device of `target`'s kind under `base`: `headroom/rates-cpu.toml` or
/// `headroom/rates-cuda.toml`.
fn cache_file(base: &Path, target: PlanTarget) -> PathBuf {
    let kind = match target {
        PlanTarget::Cpu => "cpu",
        PlanTarget::Cuda { .. } => "cuda",
    };
    base.join("headroom").join(format!("rates-{kind}.toml"))
}

/// The rates `kind` names for a device of `target`'s kind; calibrated ones must have been
/// measured first.
pub fn rates(kind: RatesKind, target: PlanTarget) -> Result<Rates> {
    if kind == RatesKind::Fixed {
        return Ok(target.rates());
    }
    let base = cache_base()
        .ok_or_else(|| Error::config("memory.rates: no cache directory (set XDG_CACHE_HOME)"))?;
    cached(&base, target)
}

/// The calibrated rates of `target`'s kind cached under `base`.
fn cached(base: &Path, target: PlanTarget) -> Result<Rates> {
    let path = cache_file(base, target);
    let text = std::fs::read_to_string(&path).map_err(|_| {
        Error::config(format!(
            "memory.rates = \"calibrated\": {} does not exist; run `headroom plan --calibrate` \
             on this machine first",
            path.display()
        ))
    })?;
    let cached: Cached = toml::from_str(&text).map_err(|err| Error::Data {
        path: path.clone(),
        detail: format!("{err}; run `headroom plan --calibrate` again"),
    })?;
    Ok(cached.into())
}

/// Measures `device`'s rates and writes them to its kind's cache file; returns them and the
/// file.
pub fn calibrate(device: &Device) -> Result<(Rates, PathBuf)> {
    let base = cache_base()
        .ok_or_else(|| Error::config("--calibrate: no cache directory (set XDG_CACHE_HOME)"))?;
    calibrate_into(device, &base)
}

/// [`calibrate`] with the cache under `base`.
fn calibrate_into(device: &Device, base: &Path) -> Result<(Rates, PathBuf)> {
    let rates = measure(device)?;
    let path = cache_file(base, device.plan_target());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    }
    let text = toml::to_string(&Cached::from(rates)).map_err(|err| Error::Data {
        path: path.clone(),
        detail: err.to_string(),
    })?;
    crate::atomic_file::write_atomically(&path, text.as_bytes())?;
    Ok((rates, path))
}

/// The median seconds of `runs` runs of `f` after one to warm up, each waited for (its result
/// freed after).
fn median_seconds(
    device: &Device,
    runs: usize,
    mut f: impl FnMut() -> Result<Array>,
) -> Result<f64> {
    f()?;
    device.synchronize()?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let out = f()?;
        device.synchronize()?;
        drop(out);
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[runs / 2].max(1e-9))
}

fn measure(device: &Device) -> Result<Rates> {
    let n = 1024;
    let product = 2.0 * (n * n * n) as f64;
    let a = Array::full(device, [n, n], DType::F32, 0.5)?;
    let matrix = median_seconds(device, 5, || Ok(matmul(&a, &a, false, false)?))?;
    let half = Array::full(device, [n, n], DType::BF16, 0.5)?;
    let half_matrix = median_seconds(device, 5, || Ok(matmul(&half, &half, false, false)?))?;
    let long = 16 << 20;
    let x = Array::full(device, [long], DType::F32, 0.5)?;
    let vector = median_seconds(device, 5, || Ok(exp(&x)?))?;
    let y = Array::full(device, [long], DType::F32, 0.25)?;
    let moved = median_seconds(device, 5, || Ok(add(&x, &y)?))?;
    let tiny = Array::full(device, [256], DType::F32, 1.0)?;
    let launches = 100;
    let launch = median_seconds(device, 5, || {
        let mut sum = add(&tiny, &tiny)?;
        for _ in 1..launches {
            sum = add(&sum, &tiny)?;
        }
        Ok(sum)
    })? / launches as f64;
    // A copy of 64 MiB to a second pool of host memory and back.
    let host = Device::cpu(DeviceConfig::new(256 << 20))?;
    let transfer = median_seconds(device, 5, || Ok(x.to_device(&host)?.to_device(device)?))?;
    Ok(Rates {
        matrix_flops: product / matrix,
        half_matrix_flops: product / half_matrix,
        vector_flops: long as f64 / vector,
        bytes: (3 * 4 * long) as f64 / moved,
        launch,
        transfer: (2 * 4 * long) as f64 / transfer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibrated_rates_are_positive_and_round_trip_through_the_cache() {
        let base = std::env::temp_dir().join(format!("headroom-rates-{}", std::process::id()));
        let device = Device::cpu(DeviceConfig::new(512 << 20)).unwrap();
        assert!(cached(&base, PlanTarget::Cpu).is_err(), "not measured yet");
        let (measured, path) = calibrate_into(&device, &base).unwrap();
        let every = [
            measured.matrix_flops,
            measured.half_matrix_flops,
            measured.vector_flops,
            measured.bytes,
            measured.launch,
            measured.transfer,
        ];
        assert!(
            every.iter().all(|r| r.is_finite() && *r > 0.0),
            "{measured:?}"
        );
        assert!(path.starts_with(&base));
        assert_eq!(cached(&base, PlanTarget::Cpu).unwrap(), measured);
        let fixed = rates(RatesKind::Fixed, PlanTarget::Cpu).unwrap();
        assert_eq!(fixed, PlanTarget::Cpu.rates());
        std::fs::remove_dir_all(&base).ok();
    }
}
