//! Fill a 64 MiB budget the way a training step does, run out, read the report, and apply its
//! advice.
//!
//! `cargo run -p headroom-alloc --example 01-oom-report`

use headroom_alloc::{Allocator, AllocatorConfig, Error, GRANULE, Tag, VirtualMemory};

/// Allocates weights, optimizer state, then 3 MiB activations until the first OOM; returns how
/// many activations fit and the error.
fn fill(config: AllocatorConfig) -> Result<(usize, Error), Error> {
    let limit = 64 << 20;
    let mut alloc = Allocator::new(VirtualMemory::new(limit), config.with_limit_bytes(limit))?;
    alloc.allocate(12 << 20, Tag::WEIGHTS)?;
    alloc.allocate(24 << 20, Tag::OPTIMIZER_STATE)?;
    let mut activations = 0;
    loop {
        match alloc.allocate(3 << 20, Tag::ACTIVATIONS) {
            Ok(_) => activations += 1,
            Err(err) => return Ok((activations, err)),
        }
    }
}

fn main() -> Result<(), Error> {
    let (fitted, err) = fill(AllocatorConfig::default())?;
    println!("{fitted} activations fit, then:\n\n{err}");

    // The verdict is fragmentation: most of the lost room is padding inside chunks handed out
    // whole. Splitting whenever anything is left over recovers it.
    let tight = AllocatorConfig::default().with_max_internal_fragmentation(GRANULE);
    let (fitted, err) = fill(tight)?;
    let report = err.oom_report().expect("filling memory ends in an OOM");
    println!(
        "with max_internal_fragmentation = {GRANULE} B: {fitted} fit, then a {} OOM with {} free \
         in holes across {} regions",
        report.verdict,
        headroom_alloc::format_bytes(report.free),
        report.regions.len()
    );
    Ok(())
}
