//! `Device::for_each_alike`: a meta device plans a loop of like iterations once, with the
//! peak and the time of running each.

use headroom_kernels::ops::gemm::matmul;
use headroom_kernels::{Array, DType, Device, DeviceConfig, Error};

/// A chunk of `rows` rows: a product that frees what it made.
fn chunk(device: &Device, weight: &Array, rows: usize) -> Result<(), Error> {
    let x = Array::zeros(device, [rows, 64], DType::F32)?;
    let y = matmul(&x, weight, false, true)?;
    drop((x, y));
    Ok(())
}

/// The planned step's peak, kernels and seconds after running `rows` as chunks, alike by
/// `kind`, and how many chunks ran.
fn plan(rows: &[usize], kind: impl Fn(usize, &usize) -> usize) -> (u64, u64, f64, usize) {
    let meta = Device::meta(DeviceConfig::new(64 << 20)).unwrap();
    let weight = Array::zeros(&meta, [512, 64], DType::F32).unwrap();
    // Memory reserved before the loop, so that its first chunk leaves the reserve as it was.
    drop(Array::zeros(&meta, [1 << 20], DType::F32).unwrap());
    let mut ran = 0;
    let items: Vec<(usize, usize)> = rows.iter().copied().enumerate().collect();
    meta.for_each_alike(
        &items,
        |(at, rows)| kind(*at, rows),
        |&(_, rows)| {
            ran += 1;
            chunk(&meta, &weight, rows)
        },
    )
    .unwrap();
    let work = meta.planned_work().unwrap();
    let peak = meta.allocator().stats().peak_in_use;
    (peak, work.kernels, work.seconds, ran)
}

#[test]
fn a_loop_of_like_chunks_is_planned_as_if_each_ran() {
    let rows = [300, 300, 300, 300, 300, 120];
    let every = plan(&rows, |at, _| at);
    let alike = plan(&rows, |_, rows| *rows);
    assert_eq!(every.3, 6);
    // The first of each size runs; the rest are priced from it.
    assert_eq!(alike.3, 2);
    assert_eq!((alike.0, alike.1), (every.0, every.1));
    assert!(
        (alike.2 - every.2).abs() <= 1e-12 * every.2,
        "{alike:?} {every:?}"
    );
}

#[test]
fn an_iteration_that_keeps_memory_runs_again() {
    let meta = Device::meta(DeviceConfig::new(64 << 20)).unwrap();
    let mut kept = Vec::new();
    meta.for_each_alike(
        &[1, 1, 1],
        |_| 0,
        |_| {
            kept.push(Array::zeros(&meta, [1024], DType::F32)?);
            Ok::<_, Error>(())
        },
    )
    .unwrap();
    assert_eq!(kept.len(), 3);
    assert_eq!(meta.allocator().stats().in_use, 3 * 4096);
}

#[test]
fn a_device_that_computes_runs_every_iteration() {
    let cpu = Device::cpu(DeviceConfig::new(64 << 20)).unwrap();
    let mut ran = 0;
    cpu.for_each_alike(
        &[7, 7, 7],
        |k| *k,
        |_| {
            ran += 1;
            Ok::<_, Error>(())
        },
    )
    .unwrap();
    assert_eq!(ran, 3);
}
