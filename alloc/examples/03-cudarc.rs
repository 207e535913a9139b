//! A cudarc program whose device memory comes from a caching allocator with OOM reports: a
//! context and a stream from cudarc, [`CudaMemory`] over them, and an [`Allocator`] over that.
//! It writes and reads back a block through cudarc's driver calls, then fills a 64 MiB limit
//! and prints the report of the allocation that no longer fits.
//!
//! `cargo run -p headroom-alloc --features cuda --example 03-cudarc`
//!
//! On a machine without a driver or a device it says so and exits with status 1.
//!
//! What it costs against cudarc's plain allocation: the allocator takes memory from the driver
//! a page or a region at a time and hands out pieces of it itself, so most allocations and
//! frees make no driver call. The `cuda-compare` bench measures it (`alloc_free`: eight sizes
//! from 256 B to 16 MiB through the allocator, against `cuMemAlloc` + `cuMemFree` of the same
//! sizes; benches/README.md). On an NVIDIA H200, growing in place by default, a pair took
//! 107 ns against the driver's 17786 ns (166 times faster); on an H100, 125 ns against 21984 ns
//! (176 times). The price is memory the allocator keeps cached: reserved bytes
//! that other processes cannot have until `release_cached` gives free regions back.

use std::process::ExitCode;

use cudarc::driver::{CudaContext, result};
use headroom_alloc::{Allocator, AllocatorConfig, CudaMemory, MemorySource, Tag, format_bytes};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("03-cudarc: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    // cudarc panics at its first driver call when no driver loads: this asks first.
    CudaMemory::require_driver()?;
    let context =
        CudaContext::new(0).map_err(|err| format!("CUDA device 0 could not be opened: {err}"))?;
    let stream = context.new_stream()?;
    // Expandable: where the device maps memory, the allocator's one region grows in place a
    // page at a time, so that what it reserves follows what is in use.
    let memory = CudaMemory::new(context.clone(), stream.clone(), true)?;
    let (free, total) = memory.free_and_total()?;
    println!(
        "{}: {} free of {}",
        memory.name(),
        format_bytes(free),
        format_bytes(total)
    );

    let config = AllocatorConfig::default().with_limit_bytes(64 << 20);
    let mut allocator = Allocator::new(memory, config)?;

    // A block is plain device memory: cudarc's driver calls take its address.
    let bytes = 1 << 20;
    let weights = allocator.allocate(bytes, Tag::WEIGHTS)?;
    let mut head = [0u8; 4];
    // SAFETY: the block's `bytes` bytes are device memory of this context, held until it is
    // freed below; the stream is synchronised before `head` is read or goes out of scope.
    unsafe {
        result::memset_d8_async(weights.addr, 42, bytes as usize, stream.cu_stream())?;
        result::memcpy_dtoh_async(&mut head, weights.addr, stream.cu_stream())?;
    }
    stream.synchronize()?;
    println!("wrote and read back {head:?} at {:#x}", weights.addr);

    // Activations of 8 MiB until the limit is reached: the allocator's report says why the last
    // did not fit and what to do.
    let mut activations = Vec::new();
    let err = loop {
        match allocator.allocate(8 << 20, Tag::ACTIVATIONS) {
            Ok(block) => activations.push(block),
            Err(err) => break err,
        }
    };
    if !err.is_out_of_memory() {
        return Err(err.into());
    }
    println!(
        "{} activations fit under 64 MiB, then:\n\n{err}",
        activations.len()
    );

    for block in activations {
        allocator.free(block.addr)?;
    }
    allocator.free(weights.addr)?;
    let stats = allocator.stats();
    println!(
        "after freeing everything: {} in use, {} still reserved (cached) from the driver",
        format_bytes(stats.in_use),
        format_bytes(stats.reserved)
    );
    Ok(())
}
