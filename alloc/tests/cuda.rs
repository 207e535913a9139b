//! The memory of a CUDA device as a source (feature `cuda`): regions reserved and given back to
//! the driver, an expandable region grown and shrunk in place, a driver out-of-memory refused and
//! reported by the allocator, other driver errors as faults, everything given back when the
//! source drops, and blocks shared by two streams through CUDA events. Without a driver each test says why it did not run (and fails instead where
//! `HEADROOM_REQUIRE_CUDA` is set); `scripts/cuda-emulated-check.sh` runs them on the CPU
//! emulation of the driver. The tests read the driver's free memory, so they take turns.
#![cfg(feature = "cuda")]

use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::{CudaContext, CudaStream, result};
use headroom_alloc::{
    Allocator, AllocatorConfig, CudaError, CudaMemory, CudaStreamClock, EXPANSION_STEP, Growth,
    MemorySource, OomCause, StreamId, Tag,
};

fn one_at_a_time() -> MutexGuard<'static, ()> {
    static DRIVER_MEMORY: Mutex<()> = Mutex::new(());
    DRIVER_MEMORY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Device 0's context and a stream of its own, or `None` once said why not.
fn device() -> Option<(Arc<CudaContext>, Arc<CudaStream>)> {
    let opened = CudaMemory::require_driver()
        .map_err(|err| err.to_string())
        .and_then(|()| {
            CudaContext::new(0).map_err(|err| format!("cuDevicePrimaryCtxRetain: {err}"))
        })
        .and_then(|context| {
            let stream = context
                .new_stream()
                .map_err(|err| format!("cuStreamCreate: {err}"))?;
            Ok((context, stream))
        });
    match opened {
        Ok(device) => Some(device),
        Err(why) => {
            if std::env::var_os("HEADROOM_REQUIRE_CUDA").is_some() {
                panic!("HEADROOM_REQUIRE_CUDA is set, and CUDA did not run: {why}");
            }
            eprintln!("cuda skipped: {why}");
            None
        }
    }
}

/// A source over device 0, or `None` once said why not.
fn source(expandable: bool) -> Option<CudaMemory> {
    let (context, stream) = device()?;
    Some(CudaMemory::new(context, stream, expandable).expect("a CUDA memory source"))
}

fn free(memory: &CudaMemory) -> u64 {
    memory.free_and_total().expect("the driver's memory info").0
}

/// The bytes the driver has free once `give_back` has run on `memory`, beyond those it had.
fn given_back(memory: &mut CudaMemory, give_back: impl FnOnce(&mut CudaMemory)) -> u64 {
    let before = free(memory);
    give_back(memory);
    free(memory).saturating_sub(before)
}

/// Fills `[base, base + bytes)` with `value` and reads back its last byte.
fn write_and_read_last(stream: &CudaStream, base: u64, bytes: u64, value: u8) -> u8 {
    let mut last = [0u8];
    // SAFETY: the caller holds `[base, base + bytes)` as device memory of the stream's context;
    // the stream is synchronised before `last` is read.
    unsafe {
        result::memset_d8_async(base, value, bytes as usize, stream.cu_stream()).unwrap();
        result::memcpy_dtoh_async(&mut last, base + bytes - 1, stream.cu_stream()).unwrap();
    }
    stream.synchronize().unwrap();
    last[0]
}

#[test]
fn a_region_is_reserved_from_the_driver_and_given_back() {
    let _turn = one_at_a_time();
    let Some(mut memory) = source(false) else {
        return;
    };
    let (start, total) = memory.free_and_total().unwrap();
    assert_eq!(memory.capacity(), total);
    assert!(memory.name().starts_with("cuda:"), "{}", memory.name());
    assert!(!memory.can_resize() && !memory.is_expandable());

    let bytes = 4 << 20;
    let base = memory.reserve(bytes).unwrap();
    assert!(base != 0 && base % 256 == 0, "base {base:#x}");
    let taken = start.saturating_sub(free(&memory));
    assert!(
        taken >= bytes,
        "{bytes} bytes reserved, the driver lost {taken}"
    );

    let given = given_back(&mut memory, |memory| memory.release(base, bytes).unwrap());
    assert!(
        given >= bytes,
        "{bytes} bytes released, the driver got {given} back"
    );
}

#[test]
fn an_expandable_region_grows_and_shrinks_in_place() {
    let _turn = one_at_a_time();
    let Some((context, stream)) = device() else {
        return;
    };
    let mut memory = CudaMemory::new(context, Arc::clone(&stream), true).unwrap();
    if !memory.is_expandable() {
        // A device that cannot map memory (some virtualised setups): nothing to test here.
        eprintln!("cuda skipped: device 0 does not support virtual memory management");
        return;
    }
    assert!(memory.can_resize());
    let base = memory.reserve(EXPANSION_STEP).unwrap();
    assert_eq!(base % EXPANSION_STEP, 0, "a page-aligned base");
    assert_eq!(write_and_read_last(&stream, base, EXPANSION_STEP, 1), 1);

    // Two more pages at its end: the same addresses, written across the pages' boundaries.
    let grown = 3 * EXPANSION_STEP;
    let before = free(&memory);
    memory
        .extend(base, EXPANSION_STEP, 2 * EXPANSION_STEP)
        .unwrap();
    let taken = before.saturating_sub(free(&memory));
    assert!(
        taken >= 2 * EXPANSION_STEP,
        "two pages mapped, the driver lost {taken}"
    );
    assert_eq!(write_and_read_last(&stream, base, grown, 2), 2);

    // A region cannot grow past the addresses it reserved: the device's memory.
    let refused = memory
        .extend(base, grown, memory.capacity())
        .expect_err("grown past the device");
    assert!(!refused.fault, "a refusal, not a fault: {refused}");

    // Its last two pages go back to the driver; the first keeps its data.
    let given = given_back(&mut memory, |memory| {
        memory.shrink(base, grown, 2 * EXPANSION_STEP).unwrap();
    });
    assert!(
        given >= 2 * EXPANSION_STEP,
        "two pages unmapped, the driver got {given} back"
    );
    let mut first = [0u8];
    // SAFETY: the region's first page is still mapped; the stream is synchronised before
    // `first` is read.
    unsafe { result::memcpy_dtoh_async(&mut first, base, stream.cu_stream()) }.unwrap();
    stream.synchronize().unwrap();
    assert_eq!(first, [2]);

    let given = given_back(&mut memory, |memory| {
        memory.release(base, EXPANSION_STEP).unwrap();
    });
    assert!(
        given >= EXPANSION_STEP,
        "the last page went back, the driver got {given}"
    );
}

#[test]
fn a_driver_out_of_memory_is_refused_and_the_allocator_reports_it() {
    let _turn = one_at_a_time();
    let Some((context, stream)) = device() else {
        return;
    };
    let mut held = CudaMemory::new(Arc::clone(&context), Arc::clone(&stream), false).unwrap();
    let total = held.capacity();

    // More than the device has: the driver's out-of-memory, a refusal the allocator backs off
    // from, not a fault.
    let refused = held
        .reserve(total + (2 << 20))
        .expect_err("more than the device");
    assert!(!refused.fault, "{refused}");
    assert!(
        refused.message.contains("cuMemAlloc") && refused.message.contains("OUT_OF_MEMORY"),
        "{refused}"
    );

    // With 64 MiB held elsewhere, the allocator's limit (the device's memory) allows what the
    // driver can no longer give: its refusal is the OOM report's cause.
    let hog = held.reserve(64 << 20).unwrap();
    let memory = CudaMemory::new(context, stream, false).unwrap();
    let mut allocator = Allocator::new(memory, AllocatorConfig::default()).unwrap();
    let err = allocator
        .allocate(total - (32 << 20), Tag::ACTIVATIONS)
        .expect_err("more than the driver has left");
    let report = err
        .oom_report()
        .unwrap_or_else(|| panic!("not an OOM: {err}"));
    match &report.cause {
        OomCause::SourceRefused(why) => {
            assert!(why.contains("OUT_OF_MEMORY"), "{why}")
        }
        cause => panic!("the driver's refusal, not {cause:?}: {err}"),
    }
    assert!(report.source.starts_with("cuda:"), "{}", report.source);
    // What does fit still does.
    let block = allocator.allocate(1 << 20, Tag::ACTIVATIONS).unwrap();
    allocator.free(block.addr).unwrap();
    held.release(hog, 64 << 20).unwrap();
}

#[test]
fn other_driver_errors_are_faults() {
    let _turn = one_at_a_time();
    let Some(mut memory) = source(false) else {
        return;
    };
    // An address the driver never gave: cuMemFree fails, and more memory would not help.
    let fault = memory.release(1 << 40, 1 << 20).expect_err("not a region");
    assert!(fault.fault, "{fault}");
    assert!(fault.message.contains("cuMemFree"), "{fault}");
    // A plain region does not grow in place.
    let base = memory.reserve(1 << 20).unwrap();
    let fault = memory
        .extend(base, 1 << 20, 1 << 20)
        .expect_err("not expandable");
    assert!(fault.fault, "{fault}");
    memory.release(base, 1 << 20).unwrap();
}

#[test]
fn everything_goes_back_to_the_driver_when_the_source_drops() {
    let _turn = one_at_a_time();
    let Some((context, stream)) = device() else {
        return;
    };
    for (expandable, growth) in [(false, Growth::OnDemand), (true, Growth::Expandable)] {
        let memory =
            CudaMemory::new(Arc::clone(&context), Arc::clone(&stream), expandable).unwrap();
        let config = AllocatorConfig::default()
            .with_limit_bytes(256 << 20)
            .with_growth(growth);
        let mut allocator = Allocator::new(memory, config).unwrap();
        let blocks: Vec<_> = [3 << 20, 40 << 20, 256, 9 << 20]
            .into_iter()
            .map(|bytes| allocator.allocate(bytes, Tag::WEIGHTS).unwrap())
            .collect();
        let reserved = allocator.stats().reserved;
        assert!(reserved >= 52 << 20, "{reserved} bytes reserved");
        // Blocks still live and regions still held: the source gives them all back.
        let driver_free = || context.mem_get_info().unwrap().0 as u64;
        let before = driver_free();
        drop(blocks);
        drop(allocator);
        let given = driver_free().saturating_sub(before);
        assert!(
            given >= reserved,
            "expandable {expandable}: {reserved} bytes reserved, the driver got {given} back"
        );
    }
}

#[test]
fn construction_errors_name_the_driver_call() {
    // The driver names the error, so this needs one too.
    if device().is_none() {
        return;
    }
    let err = CudaError::driver(
        "cuMemGetInfo",
        cudarc::driver::DriverError(
            cudarc::driver::sys::cudaError_enum::CUDA_ERROR_INVALID_CONTEXT,
        ),
    );
    let CudaError::Driver { call, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(*call, "cuMemGetInfo");
    assert!(
        err.to_string().starts_with("cuMemGetInfo failed with "),
        "{err}"
    );
}

/// Two streams over CUDA events: a block freed on the compute stream, with a fill still queued
/// there, goes to the copy stream only once the fill has run. The emulator's deferred mode
/// (`CUDA_EMULATOR_DEFER=1`) holds queued work until a synchronization, so the wait shows there;
/// on a GPU or the immediate emulator the fill may be done already, and only the end state is
/// checked.
#[test]
fn a_block_freed_on_one_stream_reaches_another_after_its_work() {
    let _turn = one_at_a_time();
    let Some((context, compute)) = device() else {
        return;
    };
    let copy = context.new_stream().expect("a second stream");
    let memory = CudaMemory::new(context, Arc::clone(&compute), true).expect("a source");
    let config = AllocatorConfig::default().with_limit_bytes(64 << 20);
    let mut alloc = Allocator::new(memory, config).unwrap();
    let clock = CudaStreamClock::new()
        .with_stream(StreamId::DEFAULT, Arc::clone(&compute))
        .with_stream(StreamId(1), Arc::clone(&copy));
    alloc.set_stream_clock(clock).unwrap();
    let staging = alloc.allocate_on(1 << 20, Tag::DATA, StreamId(1)).unwrap();
    let block = alloc.allocate(1 << 20, Tag::ACTIVATIONS).unwrap();
    // SAFETY: the block is device memory of this context, held until it is freed below; the
    // fill is queued before the free, which is what the allocator's event waits for.
    unsafe { result::memset_d8_async(block.addr, 7, 1 << 20, compute.cu_stream()) }.unwrap();
    alloc.free(block.addr).unwrap();
    let deferred = std::env::var("CUDA_EMULATOR_DEFER").is_ok_and(|value| value == "1");
    let other = alloc.allocate_on(1 << 20, Tag::DATA, StreamId(1)).unwrap();
    if deferred {
        assert_ne!(other.addr, block.addr, "the fill has not run");
        assert_eq!(alloc.stats().held_for_streams, 1 << 20);
    }
    compute.synchronize().unwrap();
    alloc.free(other.addr).unwrap();
    alloc.free(staging.addr).unwrap();
    copy.synchronize().unwrap();
    // Every block has gone back, the compute stream's among them, to any stream.
    let again = alloc.allocate_on(1 << 20, Tag::DATA, StreamId(1)).unwrap();
    assert_eq!(alloc.stats().held_for_streams, 0);
    assert_eq!(alloc.stats().in_use, 1 << 20);
    alloc.free(again.addr).unwrap();
}
