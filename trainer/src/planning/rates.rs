//! The rates the planner prices a step's work at: the device's kernels, and the host's where
//! it works beside them (an offloaded optimizer's updates, on a CPU). They are fixed per kind
//! of device by default, so that plans are the same on every machine, or this machine's own,
//! measured once by `headroom plan --calibrate` and kept in cache files that runs read under
//! `memory.rates = "calibrated"`.
//!
//! Calibration times the kernels the rates stand for on the run's device, and on the host's
//! CPU when the device is another, each the median of a few runs after a warm-up: an f32 and
//! a bf16 matrix product of 1024 x 1024 x 1024, a bf16 product of 64 rows against a weight of
//! 8192 x 1024 (where a CPU packs more than it multiplies: the two bf16 products part the
//! arithmetic's rate from the packing's), an exponential over 16 Mi elements (the
//! vector rate), a sum of two 64 MiB arrays (the memory rate), a hundred additions of 256
//! elements (a kernel's fixed cost) and a copy of 64 MiB to the device's host tier and back
//! (the transfer rate; page-locked memory on a GPU, as a run's host tier is).

use std::path::{Path, PathBuf};
use std::time::Instant;

use headroom_kernels::ops::elementwise::{add, exp};
use headroom_kernels::ops::gemm::matmul;
use headroom_kernels::{Array, DType, Device, DeviceConfig, PlanTarget, Rates, Work};
use serde::{Deserialize, Serialize};

use crate::config::{MemoryConfig, RatesKind};
use crate::error::{Error, Result};

/// The rates as the cache file keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Cached {
    matrix_flops: f64,
    half_matrix_flops: f64,
    /// Pairs of bf16 values packed per second (a cache written before it was measured is
    /// refused, as below).
    packing: f64,
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
            packing: r.packing,
            vector_flops: r.vector_flops,
            bytes: r.bytes,
            launch: r.launch,
            transfer: r.transfer,
        }
    }
}

impl Cached {
    /// The rates measured, the ranks linked at `link` (a link is not calibrated).
    fn rates(self, link: f64) -> Rates {
        let c = self;
        Rates {
            matrix_flops: c.matrix_flops,
            half_matrix_flops: c.half_matrix_flops,
            packing: c.packing,
            vector_flops: c.vector_flops,
            bytes: c.bytes,
            launch: c.launch,
            transfer: c.transfer,
            link,
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

/// The rates a plan prices its work at: the device's, and its host's (a CPU's, the device's
/// own when it is the CPU).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanRates {
    /// The device's kernels and its copies to and from the host tier.
    pub device: Rates,
    /// The host's work beside them: an offloaded optimizer's updates.
    pub host: Rates,
}

impl PlanRates {
    /// The fixed rates of a device of `target`'s kind and of a CPU host.
    pub fn fixed(target: PlanTarget) -> Self {
        Self {
            device: target.rates(),
            host: PlanTarget::Cpu.rates(),
        }
    }
}

/// The rates `memory` names for a device of `target`'s kind and its host (calibrated ones
/// must have been measured first), its ranks linked at `memory.link_bandwidth` where it is set.
pub fn rates(memory: &MemoryConfig, target: PlanTarget) -> Result<PlanRates> {
    let mut rates = match memory.rates {
        RatesKind::Fixed => PlanRates::fixed(target),
        RatesKind::Calibrated => {
            let base = cache_base().ok_or_else(|| {
                Error::config("memory.rates: no cache directory (set XDG_CACHE_HOME)")
            })?;
            PlanRates {
                device: cached(&base, target)?,
                host: cached(&base, PlanTarget::Cpu)?,
            }
        }
    };
    if let Some(link) = &memory.link_bandwidth {
        rates.device.link = link.bytes_per_second();
    }
    Ok(rates)
}

/// The calibrated rates of `target`'s kind cached under `base`, its ranks linked at the kind's
/// fixed rate.
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
    Ok(cached.rates(target.rates().link))
}

/// The rates measured on one device.
#[derive(Debug, Clone)]
pub struct Calibrated {
    /// The device measured.
    pub device: String,
    /// What it measured.
    pub rates: Rates,
    /// The cache file they were written to.
    pub path: PathBuf,
}

/// Measures `device`'s rates, and its host's when `device` is not the CPU, and writes each to
/// its kind's cache file.
pub fn calibrate(device: &Device) -> Result<Vec<Calibrated>> {
    let base = cache_base()
        .ok_or_else(|| Error::config("--calibrate: no cache directory (set XDG_CACHE_HOME)"))?;
    let mut calibrated = vec![calibrate_into(device, &base)?];
    if device.plan_target() != PlanTarget::Cpu {
        let host = Device::cpu(DeviceConfig::new(HOST_MEASURES))?;
        calibrated.push(Calibrated {
            device: "its host's CPU".into(),
            ..calibrate_into(&host, &base)?
        });
    }
    Ok(calibrated)
}

/// The host memory the measurements take: their arrays, their results and the host tier
/// (a quarter of a gigabyte).
const HOST_MEASURES: u64 = 1 << 30;

/// [`calibrate`] of `device` alone, with the cache under `base`.
fn calibrate_into(device: &Device, base: &Path) -> Result<Calibrated> {
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
    Ok(Calibrated {
        device: device.to_string(),
        rates,
        path,
    })
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

/// The side of the calibration's matrix products.
const SIDE: usize = 1024;
/// The rows and columns of its wide bf16 product (`[ROWS, SIDE] @ [COLUMNS, SIDE]^T`, a linear
/// layer's forward layout).
const WIDE: (usize, usize) = (64, 8192);
/// The elements of its long arrays (64 MiB of f32).
const LONG: usize = 16 << 20;
/// The tiny additions it times one after another for a kernel's fixed cost.
const LAUNCHES: usize = 100;

/// The median seconds of each of the calibration's kernels on one device.
#[derive(Debug, Clone, Copy)]
struct Timings {
    matrix: f64,
    half_matrix: f64,
    half_wide: f64,
    exp: f64,
    add: f64,
    /// One tiny addition's.
    launch: f64,
    /// A copy of a long array to the device's host tier and back.
    round_trip: f64,
}

fn time(device: &Device) -> Result<Timings> {
    let a = Array::full(device, [SIDE, SIDE], DType::F32, 0.5)?;
    let matrix = median_seconds(device, 5, || Ok(matmul(&a, &a, false, false)?))?;
    let half = Array::full(device, [SIDE, SIDE], DType::BF16, 0.5)?;
    let half_matrix = median_seconds(device, 5, || Ok(matmul(&half, &half, false, false)?))?;
    let (rows, weight) = wide(device)?;
    let half_wide = median_seconds(device, 5, || Ok(matmul(&rows, &weight, false, true)?))?;
    let x = Array::full(device, [LONG], DType::F32, 0.5)?;
    let exponential = median_seconds(device, 5, || Ok(exp(&x)?))?;
    let y = Array::full(device, [LONG], DType::F32, 0.25)?;
    let sum = median_seconds(device, 5, || Ok(add(&x, &y)?))?;
    let tiny = Array::full(device, [256], DType::F32, 1.0)?;
    let launch = median_seconds(device, 5, || {
        let mut sum = add(&tiny, &tiny)?;
        for _ in 1..LAUNCHES {
            sum = add(&sum, &tiny)?;
        }
        Ok(sum)
    })? / LAUNCHES as f64;
    let host = Device::host_tier_of(device, DeviceConfig::new(256 << 20))?;
    let round_trip = median_seconds(device, 5, || Ok(x.to_device(&host)?.to_device(device)?))?;
    Ok(Timings {
        matrix,
        half_matrix,
        half_wide,
        exp: exponential,
        add: sum,
        launch,
        round_trip,
    })
}

/// The rates at which the planner prices each kernel timed on a device of `target`'s kind at
/// the seconds it took: the work the planner counts for the kernel over those seconds, less
/// its launches and, for a product, less its elementwise work at the vector rate.
fn rates_of(target: PlanTarget, t: &Timings) -> Result<Rates> {
    let product = |dtype| {
        counted(
            target,
            |device| Array::full(device, [SIDE, SIDE], dtype, 0.5),
            |a| matmul(a, a, false, false),
        )
    };
    let wide_product = counted(target, wide, |(rows, weight)| {
        matmul(rows, weight, false, true)
    })?;
    let long = |device: &Device| Array::full(device, [LONG], DType::F32, 0.5);
    let exponential = counted(target, long, exp)?;
    let sum = counted(target, long, |x| add(x, x))?;
    let run = |seconds: f64, work: &Work| (seconds - work.kernels as f64 * t.launch).max(1e-9);
    let vector_flops = exponential.vector_flops / run(t.exp, &exponential);
    // A product's seconds less its launches and elementwise work.
    let spent = |seconds: f64, work: &Work| {
        (run(seconds, work) - work.vector_flops / vector_flops).max(1e-9)
    };
    let square = product(DType::BF16)?;
    let (half_matrix_flops, packing) = matrix_and_packing(
        (spent(t.half_matrix, &square), &square),
        (spent(t.half_wide, &wide_product), &wide_product),
    );
    let f32_product = product(DType::F32)?;
    Ok(Rates {
        matrix_flops: f32_product.matrix_flops / spent(t.matrix, &f32_product),
        half_matrix_flops,
        packing,
        vector_flops,
        bytes: sum.bytes / run(t.add, &sum),
        launch: t.launch,
        // Two copies, each a launch.
        transfer: (2 * 4 * LONG) as f64 / (t.round_trip - 2.0 * t.launch).max(1e-9),
        link: target.rates().link,
    })
}

/// The wide bf16 product's operands on `device`: [`WIDE`]'s rows and its weight.
fn wide(device: &Device) -> std::result::Result<(Array, Array), headroom_kernels::Error> {
    let (rows, columns) = WIDE;
    Ok((
        Array::full(device, [rows, SIDE], DType::BF16, 0.5)?,
        Array::full(device, [columns, SIDE], DType::BF16, 0.5)?,
    ))
}

/// The matrix and packing rates at which two products' counted work takes the seconds each
/// spent: two equations in the seconds per operation and per packed pair. Where neither
/// packs, or the two do not part (a noisy timing), the arithmetic takes the square product's
/// seconds and packing costs nothing.
fn matrix_and_packing(
    (square_s, square): (f64, &Work),
    (wide_s, wide): (f64, &Work),
) -> (f64, f64) {
    let alone = (square.matrix_flops / square_s, f64::INFINITY);
    let det = square.matrix_flops * wide.packed - wide.matrix_flops * square.packed;
    if det <= 0.0 {
        return alone;
    }
    let per_flop = (square_s * wide.packed - wide_s * square.packed) / det;
    let per_pair = (square.matrix_flops * wide_s - wide.matrix_flops * square_s) / det;
    if per_flop <= 0.0 || per_pair <= 0.0 {
        return alone;
    }
    (1.0 / per_flop, 1.0 / per_pair)
}

/// The work the planner counts for `op` on the operands `make` draws on a meta device of
/// `target`'s kind.
fn counted<T>(
    target: PlanTarget,
    make: impl FnOnce(&Device) -> std::result::Result<T, headroom_kernels::Error>,
    op: impl FnOnce(&T) -> std::result::Result<Array, headroom_kernels::Error>,
) -> Result<Work> {
    let meta = Device::meta_for(target, DeviceConfig::new(1 << 40))?;
    let operands = make(&meta)?;
    let work = || meta.planned_work().unwrap_or_default();
    let before = work();
    op(&operands)?;
    let after = work();
    Ok(Work {
        kernels: after.kernels - before.kernels,
        matrix_flops: after.matrix_flops - before.matrix_flops,
        packed: after.packed - before.packed,
        vector_flops: after.vector_flops - before.vector_flops,
        bytes: after.bytes - before.bytes,
        transferred: after.transferred - before.transferred,
        communicated: after.communicated - before.communicated,
        seconds: after.seconds - before.seconds,
    })
}

fn measure(device: &Device) -> Result<Rates> {
    rates_of(device.plan_target(), &time(device)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_kernels::ops::gemm::cpu_multiplies;

    #[test]
    fn calibrated_rates_are_positive_and_round_trip_through_the_cache() {
        let base = std::env::temp_dir().join(format!("headroom-rates-{}", std::process::id()));
        let device = Device::cpu(DeviceConfig::new(512 << 20)).unwrap();
        assert!(cached(&base, PlanTarget::Cpu).is_err(), "not measured yet");
        let Calibrated {
            rates: measured,
            path,
            ..
        } = calibrate_into(&device, &base).unwrap();
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
        // Infinite where the CPU widens bf16 instead of packing it, or where noise hid it.
        assert!(measured.packing > 0.0, "{measured:?}");
        assert!(path.starts_with(&base));
        assert_eq!(cached(&base, PlanTarget::Cpu).unwrap(), measured);
        let fixed = rates(&MemoryConfig::default(), PlanTarget::Cpu).unwrap();
        assert_eq!(fixed, PlanRates::fixed(PlanTarget::Cpu));
        let linked = MemoryConfig {
            link_bandwidth: Some("nvlink".parse().unwrap()),
            ..MemoryConfig::default()
        };
        let nvlink = rates(&linked, PlanTarget::cuda(0)).unwrap();
        assert_eq!(nvlink.device.link, 360e9);
        std::fs::remove_dir_all(&base).ok();
    }

    #[test]
    fn calibrated_rates_price_each_timed_kernel_at_the_seconds_it_took() {
        // An exponential bound by its arithmetic, an addition by its memory traffic, products by
        // theirs, and copies at the transfer rate.
        let timings = Timings {
            matrix: 0.02,
            half_matrix: 0.01,
            half_wide: 0.012,
            exp: 0.04,
            add: 0.03,
            launch: 2e-6,
            round_trip: 0.05,
        };
        for target in [PlanTarget::Cpu, PlanTarget::cuda(9)] {
            let rates = rates_of(target, &timings).unwrap();
            let config = DeviceConfig::new(1 << 40);
            let planned = Device::meta_with_rates(target, rates, config.clone()).unwrap();
            let host = Device::meta_host_tier_of(&planned, config, rates).unwrap();
            let seconds = || planned.planned_work().unwrap().seconds;
            let took = |f: &dyn Fn() -> Array| {
                let before = seconds();
                f();
                seconds() - before
            };
            let a = Array::full(&planned, [SIDE, SIDE], DType::F32, 0.5).unwrap();
            let half = Array::full(&planned, [SIDE, SIDE], DType::BF16, 0.5).unwrap();
            let x = Array::full(&planned, [LONG], DType::F32, 0.5).unwrap();
            let mut each = vec![
                (
                    took(&|| matmul(&a, &a, false, false).unwrap()),
                    timings.matrix,
                ),
                (took(&|| exp(&x).unwrap()), timings.exp),
                (took(&|| add(&x, &x).unwrap()), timings.add),
                (
                    took(&|| x.to_device(&host).unwrap().to_device(&planned).unwrap()),
                    timings.round_trip,
                ),
            ];
            // A CPU without bf16 instructions widens half products to f32: its half rate
            // prices nothing there.
            if target != PlanTarget::Cpu || cpu_multiplies(DType::BF16) {
                let product = took(&|| matmul(&half, &half, false, false).unwrap());
                each.push((product, timings.half_matrix));
            }
            // Where the CPU packs bf16, the wide product's packing is priced at its own rate.
            if target == PlanTarget::Cpu && cpu_multiplies(DType::BF16) {
                let (rows, weight) = wide(&planned).unwrap();
                let product = took(&|| matmul(&rows, &weight, false, true).unwrap());
                each.push((product, timings.half_wide));
            }
            for (planned, measured) in &each {
                assert!((planned - measured).abs() < 1e-9, "{target:?}: {each:?}");
            }
        }
    }

    #[test]
    fn two_products_part_the_arithmetics_rate_from_the_packings() {
        let work = |matrix_flops, packed| Work {
            matrix_flops,
            packed,
            ..Work::default()
        };
        // The calibration's two bf16 products as AMX packs them, at 2.5 TFLOP/s and 4 G pairs/s.
        let (square, wide) = (work(2.0 * 1024f64.powi(3), 0.5e6), work(1.07e9, 4.2e6));
        let seconds = |w: &Work| w.matrix_flops / 2.5e12 + w.packed / 4e9;
        let (matrix, packing) =
            matrix_and_packing((seconds(&square), &square), (seconds(&wide), &wide));
        assert!((matrix / 2.5e12 - 1.0).abs() < 1e-9, "{matrix}");
        assert!((packing / 4e9 - 1.0).abs() < 1e-9, "{packing}");
        // Products that pack nothing (bf16 widened to f32) are arithmetic alone.
        let (square, wide) = (work(2e9, 0.0), work(1e9, 0.0));
        assert_eq!(
            matrix_and_packing((1e-3, &square), (0.5e-3, &wide)),
            (2e12, f64::INFINITY)
        );
        // A wide product timed faster than its arithmetic alone cannot part them either.
        let (square, wide) = (work(2e9, 0.5e6), work(1e9, 4e6));
        assert_eq!(
            matrix_and_packing((1e-3, &square), (0.1e-3, &wide)).1,
            f64::INFINITY
        );
    }
}
