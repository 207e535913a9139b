//! Expandable device memory (PyTorch's expandable segments): under `Growth::Expandable` the
//! allocator's one region grows in place through the driver's virtual memory management, holds
//! data across the pages it is mapped from, gives pages back to the driver as it shrinks, and
//! runs out at its limit like any other. The tests read the driver's free memory, so they take
//! turns (each test file is a process of its own).
#![cfg(feature = "cuda")]

mod common;

use std::sync::{Mutex, MutexGuard};

use headroom_alloc::{AllocatorConfig, EXPANSION_STEP, Growth};
use headroom_kernels::cuda::memory_info;
use headroom_kernels::ops::elementwise as ew;
use headroom_kernels::{Array, DType, Device};

/// f32 elements in 3 MiB: each such array starts in one page and ends in the next.
const LEN: usize = 3 << 18;

fn one_at_a_time() -> MutexGuard<'static, ()> {
    static DRIVER_MEMORY: Mutex<()> = Mutex::new(());
    DRIVER_MEMORY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// CUDA device 0 with an expandable allocator under `limit`, or `None` once said why not.
fn expandable(limit: u64) -> Option<Device> {
    let config = AllocatorConfig::default()
        .with_limit_bytes(limit)
        .with_growth(Growth::Expandable);
    match Device::cuda(0, config) {
        Ok(device) => Some(device),
        Err(why) => {
            common::cuda_skipped(&why.to_string());
            None
        }
    }
}

/// Bytes the driver reports free on device 0.
fn driver_free() -> u64 {
    memory_info(0).expect("the driver's memory info").0
}

fn values(seed: usize) -> Vec<f64> {
    (0..LEN).map(|i| ((i * 7 + seed) % 1009) as f64).collect()
}

#[test]
fn an_expandable_region_grows_in_place_and_gives_its_pages_back_to_the_driver() {
    let _turn = one_at_a_time();
    let Some(device) = expandable(256 << 20) else {
        return;
    };
    let (free, total) = memory_info(0).unwrap();
    assert!(free <= total, "{free} free of {total}");
    // Loads the elementwise kernels (their module takes device memory of its own) before the
    // driver's memory is counted.
    drop(ew::add(
        &Array::zeros(&device, [8], DType::F32).unwrap(),
        &Array::zeros(&device, [8], DType::F32).unwrap(),
    ));

    let mut arrays = Vec::new();
    for seed in 0..6 {
        let (free_before, reserved_before) = (driver_free(), device.allocator().stats().reserved);
        arrays.push(Array::from_f64(&device, [LEN], DType::F32, &values(seed)).unwrap());
        let stats = device.allocator().stats();
        assert_eq!(stats.regions, 1, "array {seed}: the region grows in place");
        assert_eq!(stats.reserved % EXPANSION_STEP, 0, "whole pages");
        assert!(
            stats.reserved - stats.in_use < EXPANSION_STEP,
            "array {seed}: {} reserved for {} in use, a page or more to spare",
            stats.reserved,
            stats.in_use
        );
        let grown = stats.reserved - reserved_before;
        let taken = free_before.saturating_sub(driver_free());
        assert!(
            taken >= grown,
            "array {seed}: the region grew by {grown} bytes, the driver lost {taken}"
        );
    }
    // Data across page boundaries reads back, and a kernel reads and writes it there.
    for (seed, array) in arrays.iter().enumerate() {
        assert_eq!(array.to_f64().unwrap(), values(seed), "array {seed}");
    }
    let sum = ew::add(&arrays[1], &arrays[4]).unwrap();
    let want: Vec<f64> = values(1)
        .iter()
        .zip(values(4))
        .map(|(a, b)| a + b)
        .collect();
    assert_eq!(sum.to_f64().unwrap(), want);
    drop(sum);

    // The free tail goes back to the driver, page by page; what stays keeps its data.
    arrays.truncate(2);
    let (free_before, reserved_before) = (driver_free(), device.allocator().stats().reserved);
    let released = device.allocator().release_cached();
    let stats = device.allocator().stats();
    assert!(
        released >= 3 * EXPANSION_STEP,
        "only {released} bytes released"
    );
    assert_eq!(stats.reserved, reserved_before - released);
    assert_eq!(stats.regions, 1);
    let given = driver_free().saturating_sub(free_before);
    assert!(
        given >= released,
        "{released} bytes released, the driver got {given} back"
    );
    assert_eq!(arrays[1].to_f64().unwrap(), values(1));

    // Wholly free, the region goes back with its addresses.
    drop(arrays);
    let free_before = driver_free();
    let released = device.allocator().release_cached();
    let stats = device.allocator().stats();
    assert_eq!((stats.regions, stats.reserved), (0, 0));
    assert!(driver_free().saturating_sub(free_before) >= released);
    // And a new one grows as the first did.
    let again = Array::from_f64(&device, [LEN], DType::F32, &values(9)).unwrap();
    assert_eq!(again.to_f64().unwrap(), values(9));
    assert_eq!(device.allocator().stats().regions, 1);
}

#[test]
fn an_expandable_region_runs_out_at_its_limit_and_coalesces_what_is_freed() {
    let _turn = one_at_a_time();
    let Some(device) = expandable(16 << 20) else {
        return;
    };
    let four_mib = |fill: f64| Array::full(&device, [1 << 20], DType::F32, fill);
    let mut held: Vec<Array> = (0..4).map(|i| four_mib(i as f64).unwrap()).collect();
    let stats = device.allocator().stats();
    assert_eq!(
        (stats.regions, stats.reserved),
        (1, 16 << 20),
        "filled to the limit"
    );
    let err = four_mib(9.0).unwrap_err();
    assert!(err.is_out_of_memory(), "{err}");
    let report = err.oom_report().expect("an OOM report");
    assert!(report.source.starts_with("cuda:0"), "{}", report.source);

    // The two middle arrays, freed, are one free block of 8 MiB in the one region: an 8 MiB
    // array fits there, the arrays either side keep their data.
    held.drain(1..3);
    let eight = Array::full(&device, [2 << 20], DType::F32, 5.0).unwrap();
    assert_eq!(device.allocator().stats().regions, 1);
    assert!(eight.to_f64().unwrap().iter().all(|&v| v == 5.0));
    assert!(held[0].to_f64().unwrap().iter().all(|&v| v == 0.0));
    assert!(held[1].to_f64().unwrap().iter().all(|&v| v == 3.0));
}
