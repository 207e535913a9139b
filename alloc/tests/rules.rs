//! One test per rule of the allocator: split, coalescing, growth, garbage collection, limits,
//! verdicts, tags and invalid frees.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use headroom_alloc::trace::{TraceOp, replay};
use headroom_alloc::{
    Allocator, AllocatorConfig, Error, FaultInjecting, Growth, HostMemory, InvalidFreeReason,
    Limit, MemorySource, OomCause, Reservation, SourceError, Tag, Verdict, VirtualMemory,
};

const MIB: u64 = 1 << 20;

/// An allocator with `growth` over a virtual space of exactly `limit` bytes.
fn growing(limit: u64, growth: Growth) -> Allocator {
    let config = AllocatorConfig::default()
        .with_limit_bytes(limit)
        .with_growth(growth);
    Allocator::new(VirtualMemory::new(limit), config).unwrap()
}

/// The default, on-demand growth over a virtual space of `limit` bytes whose regions cannot
/// grow in place, so that it reserves region by region.
fn on_demand(limit: u64) -> Allocator {
    let config = AllocatorConfig::default().with_limit_bytes(limit);
    Allocator::new(VirtualMemory::new(limit).fixed_regions(), config).unwrap()
}

fn preallocated(limit: u64) -> Allocator {
    growing(limit, Growth::Preallocate)
}

fn expandable(limit: u64) -> Allocator {
    growing(limit, Growth::Expandable)
}

#[test]
fn requests_are_rounded_to_256_bytes_and_zero_gets_a_unique_block() {
    let mut alloc = on_demand(MIB);
    let a = alloc.allocate(1, Tag::OTHER).unwrap();
    let b = alloc.allocate(0, Tag::OTHER).unwrap();
    let c = alloc.allocate(257, Tag::OTHER).unwrap();
    assert_eq!((a.size, b.size, c.size), (256, 256, 512));
    assert_ne!(a.addr, b.addr);
    assert_eq!(b.requested, 0);
    alloc.free(b.addr).unwrap();
}

#[test]
fn a_chunk_at_least_twice_the_request_is_split() {
    let mut alloc = preallocated(MIB);
    let a = alloc.allocate(4096, Tag::OTHER).unwrap();
    assert_eq!(a.size, 4096);
    let stats = alloc.stats();
    assert_eq!(stats.largest_free, MIB - 4096);
}

#[test]
fn a_chunk_under_twice_the_request_is_handed_out_whole() {
    let mut alloc = preallocated(MIB);
    let a = alloc.allocate(3000, Tag::OTHER).unwrap(); // 3072 B
    let guard = alloc.allocate(256, Tag::OTHER).unwrap();
    alloc.free(a.addr).unwrap();
    // A 2048-byte request in the free 3072-byte chunk: 3072 < 2 * 2048, remainder 1024 < cap.
    let b = alloc.allocate(2048, Tag::OTHER).unwrap();
    assert_eq!((b.addr, b.size, b.requested), (a.addr, 3072, 2048));
    let stats = alloc.stats();
    assert_eq!(stats.requested_in_use, 2048 + 256);
    assert_eq!(
        stats.internal_fragmentation, 1024,
        "the unsplit remainder is padding"
    );
    alloc.free(guard.addr).unwrap();
}

#[test]
fn the_internal_fragmentation_cap_forces_a_split() {
    let config = AllocatorConfig::default()
        .with_limit_bytes(MIB)
        .with_growth(Growth::Preallocate)
        .with_max_internal_fragmentation(1024);
    let mut alloc = Allocator::new(VirtualMemory::new(MIB), config).unwrap();
    let a = alloc.allocate(3000, Tag::OTHER).unwrap();
    let _guard = alloc.allocate(256, Tag::OTHER).unwrap();
    alloc.free(a.addr).unwrap();
    // Remainder 1024 reaches the cap, so the 3072-byte chunk is split though 3072 < 2 * 2048.
    let b = alloc.allocate(2048, Tag::OTHER).unwrap();
    assert_eq!(b.size, 2048);
}

#[test]
fn zero_slack_never_splits_off_an_empty_chunk() {
    // With a cap of 0 an exact fit (remainder 0) met the cap and split off a zero-size chunk at
    // the next chunk's address: freeing that next allocation then failed as a "double free".
    let config = AllocatorConfig::default()
        .with_limit_bytes(MIB)
        .with_max_internal_fragmentation(0);
    let alloc_op = |id| TraceOp::Alloc {
        id,
        size: 256,
        tag: Tag::OTHER,
    };
    let ops = [
        alloc_op(1),
        alloc_op(2),
        TraceOp::Free { id: 1 },
        alloc_op(3), // takes 1's chunk exactly
        TraceOp::Free { id: 2 },
    ];
    let report = replay(&ops, config.clone(), MIB).unwrap();
    assert_eq!((report.allocs, report.frees, report.ooms), (3, 2, 0));

    // A request that fills a whole preallocated region is an exact fit too.
    let config = config.with_growth(Growth::Preallocate);
    let mut alloc = Allocator::new(VirtualMemory::new(MIB), config).unwrap();
    let whole = alloc.allocate(MIB, Tag::OTHER).unwrap();
    assert_eq!(whole.size, MIB);
    alloc.validate().unwrap();
    assert_eq!(alloc.snapshot().regions[0].chunks.len(), 1);
    alloc.free(whole.addr).unwrap();
    alloc.validate().unwrap();
}

#[test]
fn best_fit_prefers_the_smallest_block_then_the_lowest_address() {
    let mut alloc = preallocated(MIB);
    let blocks: Vec<_> = [4096, 256, 2048, 256, 2048, 256]
        .iter()
        .map(|&size| alloc.allocate(size, Tag::OTHER).unwrap())
        .collect();
    alloc.free(blocks[0].addr).unwrap(); // 4 KiB hole
    alloc.free(blocks[4].addr).unwrap(); // 2 KiB hole, higher
    alloc.free(blocks[2].addr).unwrap(); // 2 KiB hole, lower
    let fit = alloc.allocate(1500, Tag::OTHER).unwrap();
    assert_eq!(fit.addr, blocks[2].addr);
    let next = alloc.allocate(1500, Tag::OTHER).unwrap();
    assert_eq!(next.addr, blocks[4].addr);
}

#[test]
fn a_freed_chunk_coalesces_with_both_neighbours() {
    let mut alloc = preallocated(MIB);
    let a = alloc.allocate(1024, Tag::OTHER).unwrap();
    let b = alloc.allocate(1024, Tag::OTHER).unwrap();
    let c = alloc.allocate(1024, Tag::OTHER).unwrap();
    let _d = alloc.allocate(1024, Tag::OTHER).unwrap();
    alloc.free(a.addr).unwrap();
    alloc.free(c.addr).unwrap();
    let chunks = || alloc.snapshot().regions[0].chunks.len();
    assert_eq!(chunks(), 5); // a, b, c, d, tail
    alloc.free(b.addr).unwrap();
    let snapshot = alloc.snapshot();
    let region = &snapshot.regions[0];
    assert_eq!(region.chunks.len(), 3); // a+b+c, d, tail
    assert_eq!(
        (region.chunks[0].size, region.chunks[0].in_use),
        (3072, false)
    );
    // The merged block serves a request of all three.
    assert_eq!(alloc.allocate(3072, Tag::OTHER).unwrap().addr, a.addr);
}

#[test]
fn on_demand_regions_follow_the_segment_rule_and_the_limit_clamps_them() {
    let mut alloc = on_demand(64 * MIB);
    let mut sizes = Vec::new();
    for request in [256, 256, 3 * MIB, 21 * MIB, 40 * MIB] {
        let before = alloc.stats().regions;
        // Fill what is free so that the next request must grow.
        let largest = alloc.largest_free();
        if largest > 0 {
            alloc.allocate(largest, Tag::OTHER).unwrap();
        }
        if alloc.allocate(request, Tag::OTHER).is_err() {
            sizes.push(0);
            continue;
        }
        let snapshot = alloc.snapshot();
        assert_eq!(snapshot.regions.len(), before + 1);
        sizes.push(snapshot.regions.last().unwrap().size);
    }
    // Small requests share 2 MiB regions, medium ones 20 MiB, and a large one gets its own size
    // rounded to 2 MiB. 44 MiB are reserved by then, so 40 MiB passes the limit.
    assert_eq!(sizes, [2 * MIB, 2 * MIB, 20 * MIB, 22 * MIB, 0]);
    assert_eq!(alloc.reserved(), 46 * MIB);
    // A medium request's 20 MiB segment is clamped to the 18 MiB left.
    alloc.allocate(3 * MIB, Tag::OTHER).unwrap();
    assert_eq!(alloc.reserved(), 64 * MIB);
}

#[test]
fn on_demand_grows_one_region_in_place_where_the_source_can() {
    let config = AllocatorConfig::default().with_limit_bytes(64 * MIB);
    let mut alloc = Allocator::new(VirtualMemory::new(64 * MIB), config).unwrap();
    let a = alloc.allocate(MIB, Tag::OTHER).unwrap();
    let b = alloc.allocate(5 * MIB / 2, Tag::OTHER).unwrap();
    // One region, grown by a whole 2 MiB step, and the request that grew it split off the
    // region's end: TensorFlow's rule alone would hand it the 3 MiB chunk whole.
    assert_eq!(alloc.snapshot().regions.len(), 1);
    assert_eq!(alloc.reserved(), 4 * MIB);
    assert_eq!((b.addr, b.size), (a.addr + MIB, 5 * MIB / 2));
    let c = alloc.allocate(256, Tag::OTHER).unwrap();
    assert_eq!(c.addr, b.addr + b.size);
    assert_eq!(alloc.reserved(), 4 * MIB);
    alloc.free(b.addr).unwrap();
    alloc.free(c.addr).unwrap();
    // The free tail goes back in whole steps.
    assert_eq!(alloc.release_cached(), 2 * MIB);
    assert_eq!(alloc.reserved(), 2 * MIB);
}

#[test]
fn a_refusing_source_is_backed_off_to_90_percent() {
    // The source refuses anything that would pass 3 MiB in total.
    let source =
        FaultInjecting::new(VirtualMemory::new(64 * MIB).fixed_regions()).fail_beyond(3 * MIB);
    let config = AllocatorConfig::default().with_limit_bytes(64 * MIB);
    let mut alloc = Allocator::new(source, config).unwrap();
    alloc.allocate(2 * MIB, Tag::OTHER).unwrap(); // region 1: 20 MiB backed off to 2 MiB
    assert_eq!(
        alloc.snapshot().regions[0].size,
        expected_back_off(20 * MIB, 3 * MIB)
    );
    // Region 2 asks 2 MiB, then steps down by 10% (rounded down to 256 B) until it fits in the
    // 3 MiB less what region 1 took.
    let room = 3 * MIB - alloc.reserved();
    let expected = expected_back_off(2 * MIB, room);
    let a = alloc.allocate(room / 2 + 256, Tag::OTHER).unwrap();
    assert_eq!(alloc.snapshot().regions[1].size, expected);
    assert_eq!(
        a.size, expected,
        "less than twice the request, so handed out whole"
    );
}

/// The size a request for `size` bytes backs off to, 10% at a time, to fit in `room`.
fn expected_back_off(mut size: u64, room: u64) -> u64 {
    while size > room {
        size = (size / 10 * 9) & !255;
    }
    size
}

#[test]
fn a_refused_reserve_below_the_request_is_a_reported_oom() {
    let source = FaultInjecting::new(VirtualMemory::new(64 * MIB)).fail_beyond(2 * MIB);
    let config = AllocatorConfig::default().with_limit_bytes(64 * MIB);
    let mut alloc = Allocator::new(source, config).unwrap();
    alloc.allocate(MIB, Tag::WEIGHTS).unwrap();
    let err = alloc.allocate(4 * MIB, Tag::ACTIVATIONS).unwrap_err();
    let report = err.oom_report().unwrap();
    assert!(
        matches!(report.cause, OomCause::SourceRefused(_)),
        "{:?}",
        report.cause
    );
    assert_eq!(report.verdict, Verdict::Capacity);
    assert!(err.to_string().contains("refused"), "{err}");
}

/// A virtual space that fails every reserve after the first `healthy` with a fault (as a
/// device in an error state does), counting the attempts.
struct Broken {
    inner: VirtualMemory,
    healthy: usize,
    attempts: Arc<AtomicUsize>,
}

impl MemorySource for Broken {
    fn name(&self) -> &str {
        "broken"
    }
    fn reserve(&mut self, bytes: u64) -> Result<u64, SourceError> {
        let attempt = 1 + self.attempts.fetch_add(1, Ordering::Relaxed);
        if attempt > self.healthy {
            return Err(SourceError::fault("the device is in an error state"));
        }
        self.inner.reserve(bytes)
    }
    fn release(&mut self, base: u64, bytes: u64) -> Result<(), SourceError> {
        self.inner.release(base, bytes)
    }
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
}

#[test]
fn a_source_fault_is_an_error_at_once_not_an_oom() {
    let attempts = Arc::default();
    let source = Broken {
        inner: VirtualMemory::new(64 * MIB),
        healthy: 1,
        attempts: Arc::clone(&attempts),
    };
    let mut alloc = Allocator::new(source, AllocatorConfig::default()).unwrap();
    let first = alloc.allocate(MIB, Tag::OTHER).unwrap();
    alloc.free(first.addr).unwrap();
    // The free 2 MiB region is collected and growth retried only for an out-of-memory; a fault
    // ends the allocation at the first failed reserve.
    match alloc.allocate(8 * MIB, Tag::OTHER) {
        Err(Error::Source { op, message, .. }) => {
            assert_eq!(op, "reserve");
            assert!(message.contains("error state"), "{message}");
        }
        other => panic!("expected a source error, got {other:?}"),
    }
    let stats = alloc.stats();
    assert_eq!((stats.ooms, stats.regions_released), (0, 0));
    assert_eq!(attempts.load(Ordering::Relaxed), 2, "no back-off");
    alloc.validate().unwrap();
}

#[test]
fn garbage_collection_releases_free_regions_and_retries() {
    let run = |gc: bool| {
        let config = AllocatorConfig::default()
            .with_limit_bytes(16 * MIB)
            .with_garbage_collection(gc);
        let source = VirtualMemory::new(16 * MIB).fixed_regions();
        let mut alloc = Allocator::new(source, config).unwrap();
        let a = alloc.allocate(MIB, Tag::OTHER).unwrap(); // region 2 MiB
        let b = alloc.allocate(12 * MIB, Tag::OTHER).unwrap(); // region 12 MiB
        alloc.free(a.addr).unwrap();
        // 14 MiB reserved, 2 free in region 1 and 2 MiB of headroom: a 3 MiB request fits only
        // once the free 2 MiB region is given back.
        let result = alloc.allocate(3 * MIB, Tag::OTHER);
        (result.map(|_| ()), alloc.stats().regions_released, b)
    };
    let (with_gc, released, _) = run(true);
    assert!(with_gc.is_ok());
    assert_eq!(released, 1);
    let (without_gc, _, _) = run(false);
    let err = without_gc.unwrap_err();
    assert_eq!(err.oom_report().unwrap().verdict, Verdict::Fragmentation);
}

#[test]
fn an_optional_allocation_takes_free_chunks_and_growth_but_never_collects_or_counts_an_oom() {
    let mut alloc = on_demand(16 * MIB);
    let a = alloc.allocate(MIB, Tag::OTHER).unwrap(); // region 2 MiB
    let _b = alloc.allocate(12 * MIB, Tag::OTHER).unwrap(); // region 12 MiB
    alloc.free(a.addr).unwrap();
    // A free chunk holds it.
    let scratch = alloc.try_allocate(MIB, Tag::WORKSPACE).unwrap();
    assert_eq!(scratch.tag, Tag::WORKSPACE);
    alloc.free(scratch.addr).unwrap();
    // 3 MiB fits only once the free 2 MiB region is given back: `allocate` would do that,
    // `try_allocate` leaves the cache and the counters alone.
    assert!(alloc.try_allocate(3 * MIB, Tag::WORKSPACE).is_none());
    let stats = alloc.stats();
    assert_eq!((stats.ooms, stats.regions_released), (0, 0));
    assert_eq!(alloc.reserved(), 14 * MIB);
    // The free 2 MiB, then a new region in the 2 MiB of headroom; past the limit, nothing.
    assert!(alloc.try_allocate(2 * MIB, Tag::WORKSPACE).is_some());
    assert!(alloc.try_allocate(2 * MIB, Tag::WORKSPACE).is_some());
    assert_eq!(alloc.reserved(), 16 * MIB);
    assert!(alloc.try_allocate(256, Tag::WORKSPACE).is_none());
    assert!(alloc.try_allocate(32 * MIB, Tag::WORKSPACE).is_none());
    assert_eq!(alloc.stats().ooms, 0);
    alloc.validate().unwrap();
}

#[test]
fn release_cached_gives_back_only_entirely_free_regions() {
    let mut alloc = on_demand(64 * MIB);
    let a = alloc.allocate(MIB, Tag::OTHER).unwrap();
    let _b = alloc.allocate(3 * MIB, Tag::OTHER).unwrap();
    assert_eq!(alloc.reserved(), 22 * MIB);
    alloc.free(a.addr).unwrap();
    assert_eq!(alloc.release_cached(), 2 * MIB);
    assert_eq!(alloc.reserved(), 20 * MIB);
    assert_eq!(alloc.release_cached(), 0);
}

#[test]
fn requests_above_the_limit_fail_at_once() {
    let mut alloc = on_demand(4 * MIB);
    for size in [4 * MIB + 1, u64::MAX, u64::MAX - 100] {
        let err = alloc.allocate(size, Tag::DATA).unwrap_err();
        let report = err.oom_report().unwrap();
        assert_eq!(report.cause, OomCause::ExceedsLimit);
        assert_eq!(report.verdict, Verdict::Capacity);
        assert!(err.to_string().contains("larger than the limit"), "{err}");
    }
    assert_eq!(
        alloc.reserved(),
        0,
        "nothing is reserved for an impossible request"
    );
    assert_eq!(alloc.stats().ooms, 3);
    assert!(alloc.allocate(4 * MIB, Tag::DATA).is_ok());
}

#[test]
fn fragmentation_and_capacity_ooms_are_told_apart() {
    let mut alloc = preallocated(MIB);
    let blocks: Vec<_> = (0..16)
        .map(|_| alloc.allocate(MIB / 16, Tag::ACTIVATIONS).unwrap())
        .collect();
    for block in blocks.iter().step_by(2) {
        alloc.free(block.addr).unwrap();
    }
    // Half the memory is free, in 64 KiB holes.
    let err = alloc.allocate(MIB / 4, Tag::ACTIVATIONS).unwrap_err();
    let report = err.oom_report().unwrap();
    assert_eq!(report.verdict, Verdict::Fragmentation);
    assert_eq!(report.free, MIB / 2);
    assert_eq!(report.largest_free, MIB / 16);
    assert!((report.fragmentation - 0.875).abs() < 1e-9);
    let text = err.to_string();
    for needle in [
        "fragmentation OOM",
        "held in holes",
        "activations",
        "bins:",
        "[......+#####",
        "largest live",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    let err = alloc.allocate(MIB * 3 / 4, Tag::ACTIVATIONS).unwrap_err();
    let report = err.oom_report().unwrap();
    assert_eq!(report.verdict, Verdict::Capacity);
    assert!(err.to_string().contains("reduce the batch size"), "{err}");
    // Blocks of 6.25 cells each, the even ones free: cells 0-5 free, 6 partly used, 7-11 used.
    let map = &report.regions[0].map;
    assert_eq!(map.len(), 100);
    assert_eq!(
        (&map[..6], &map[6..7], &map[7..12]),
        ("......", "+", "#####")
    );
    assert_eq!(report.largest_live.len(), 8);
}

#[test]
fn tags_keep_live_and_peak_bytes() {
    let mut alloc = on_demand(64 * MIB);
    let w = alloc.allocate(MIB, Tag::WEIGHTS).unwrap();
    let a1 = alloc.allocate(2 * MIB, Tag::ACTIVATIONS).unwrap();
    let a2 = alloc.allocate(MIB, Tag::ACTIVATIONS).unwrap();
    alloc.free(a1.addr).unwrap();
    let kv = Tag::named("kv-cache").unwrap();
    alloc.allocate(512, kv).unwrap();
    let stats = alloc.stats();
    let usage = |tag| stats.tags.iter().find(|u| u.tag == tag).copied().unwrap();
    assert_eq!(
        (usage(Tag::WEIGHTS).live, usage(Tag::WEIGHTS).peak),
        (MIB, MIB)
    );
    assert_eq!(usage(Tag::ACTIVATIONS).live, MIB);
    assert_eq!(usage(Tag::ACTIVATIONS).peak, 3 * MIB);
    assert_eq!(usage(Tag::ACTIVATIONS).live_allocations, 1);
    assert_eq!(usage(kv).live, 512);
    alloc.reset_peak();
    let stats = alloc.stats();
    let activations = stats
        .tags
        .iter()
        .find(|u| u.tag == Tag::ACTIVATIONS)
        .unwrap();
    assert_eq!(activations.peak, MIB);
    assert_eq!(stats.peak_in_use, stats.in_use);
    alloc.free(a2.addr).unwrap();
    alloc.free(w.addr).unwrap();
}

#[test]
fn invalid_frees_are_typed_errors_that_change_nothing() {
    let mut alloc = preallocated(MIB);
    let a = alloc.allocate(1024, Tag::OTHER).unwrap();
    let b = alloc.allocate(1024, Tag::OTHER).unwrap();
    let before = alloc.snapshot();
    let reason = |result: Result<_, Error>| match result {
        Err(Error::InvalidFree { reason, .. }) => reason,
        other => panic!("expected an invalid free, got {other:?}"),
    };
    assert_eq!(
        reason(alloc.free(a.addr + 256)),
        InvalidFreeReason::InteriorAddress
    );
    assert_eq!(reason(alloc.free(12345)), InvalidFreeReason::UnknownAddress);
    assert_eq!(alloc.snapshot(), before);
    alloc.free(b.addr).unwrap();
    // b merged with the free tail, so its address is now a free chunk's start: a double free.
    let err = alloc.free(b.addr).unwrap_err();
    assert!(err.to_string().contains("double free"), "{err}");
    alloc.free(a.addr).unwrap();
    assert_eq!(reason(alloc.free(a.addr)), InvalidFreeReason::DoubleFree);
    assert_eq!(alloc.stats().frees, 2);
}

#[test]
fn limits_as_fractions_and_bad_configurations() {
    let config = AllocatorConfig::default().with_limit(Limit::Fraction(0.25));
    let alloc = Allocator::new(VirtualMemory::new(64 * MIB), config).unwrap();
    assert_eq!((alloc.limit(), alloc.capacity()), (16 * MIB, 64 * MIB));
    let bad = AllocatorConfig::default().with_limit(Limit::Fraction(2.0));
    let err = Allocator::new(VirtualMemory::new(MIB), bad).unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
    let nothing = FaultInjecting::new(VirtualMemory::new(MIB)).fail_beyond(0);
    let config = AllocatorConfig::default().with_growth(Growth::Preallocate);
    let err = Allocator::new(nothing, config).unwrap_err();
    assert!(matches!(err, Error::Source { op: "reserve", .. }), "{err}");
}

#[test]
fn a_preallocation_the_source_refuses_backs_off_and_the_rest_follows_on_demand() {
    // A device of 64 MiB whose free memory is 50 MiB (a GPU's context and other processes hold
    // the rest): the whole device as the limit cannot be reserved at once.
    let source = FaultInjecting::new(VirtualMemory::new(64 * MIB)).fail_beyond(50 * MIB);
    let config = AllocatorConfig::default().with_growth(Growth::Preallocate);
    let mut alloc = Allocator::new(source, config).unwrap();
    // 64 MiB, then 10% less at a time (rounded down to 256 B) until it fits in 50 MiB.
    let mut expected = 64 * MIB;
    while expected > 50 * MIB {
        expected = (expected / 10 * 9) & !255;
    }
    assert_eq!((alloc.reserved(), alloc.limit()), (expected, 64 * MIB));
    let whole = alloc.allocate(expected, Tag::WEIGHTS).unwrap();
    // Past the first region, the rest of the limit is asked for, and backed off from, again.
    let more = alloc.allocate(MIB, Tag::ACTIVATIONS).unwrap();
    assert_eq!(alloc.stats().regions, 2);
    assert!(alloc.reserved() <= 50 * MIB, "{}", alloc.reserved());
    let err = alloc.allocate(4 * MIB, Tag::ACTIVATIONS).unwrap_err();
    assert!(matches!(
        err.oom_report().unwrap().cause,
        OomCause::SourceRefused(_)
    ));
    alloc.free(whole.addr).unwrap();
    alloc.free(more.addr).unwrap();
}

#[test]
fn an_expandable_region_grows_in_place_by_just_enough_steps() {
    let mut alloc = expandable(64 * MIB);
    let a = alloc.allocate(MIB, Tag::WEIGHTS).unwrap();
    assert_eq!(alloc.reserved(), 2 * MIB);
    // 1 MiB is free at the tail; 3 MiB more needs 2 MiB more, one step.
    let b = alloc.allocate(3 * MIB, Tag::ACTIVATIONS).unwrap();
    assert_eq!(
        b.addr,
        a.addr + MIB,
        "the free tail was extended, not left behind"
    );
    assert_eq!(alloc.reserved(), 4 * MIB);
    // With the tail in use, 6 MiB more adds a new chunk of three steps.
    let c = alloc.allocate(6 * MIB, Tag::ACTIVATIONS).unwrap();
    assert_eq!(c.addr, b.addr + 3 * MIB);
    let stats = alloc.stats();
    assert_eq!(
        (stats.reserved, stats.regions, stats.free),
        (10 * MIB, 1, 0)
    );
}

#[test]
fn release_cached_gives_back_the_free_tail_of_an_expandable_region() {
    let mut alloc = expandable(64 * MIB);
    let a = alloc.allocate(MIB, Tag::WEIGHTS).unwrap();
    let b = alloc.allocate(7 * MIB, Tag::ACTIVATIONS).unwrap();
    assert_eq!(alloc.reserved(), 8 * MIB);
    alloc.free(b.addr).unwrap();
    // 7 MiB free at the tail: three whole steps go back, 1 MiB stays.
    assert_eq!(alloc.release_cached(), 6 * MIB);
    assert_eq!(alloc.reserved(), 2 * MIB);
    assert_eq!(alloc.largest_free(), MIB);
    // The region grows again from there.
    alloc.allocate(4 * MIB, Tag::ACTIVATIONS).unwrap();
    assert_eq!(alloc.reserved(), 6 * MIB);
    alloc.free(a.addr).unwrap();
}

#[test]
fn expandable_growth_over_a_fixed_source_reserves_step_rounded_regions() {
    let config = AllocatorConfig::default()
        .with_limit_bytes(64 * MIB)
        .with_growth(Growth::Expandable);
    let mut alloc = Allocator::new(HostMemory::new(64 * MIB), config).unwrap();
    alloc.allocate(MIB, Tag::WEIGHTS).unwrap();
    alloc.allocate(3 * MIB, Tag::WEIGHTS).unwrap();
    let mut sizes: Vec<u64> = alloc.snapshot().regions.iter().map(|r| r.size).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [2 * MIB, 4 * MIB]);
}

#[test]
fn an_expandable_region_stops_at_the_limit() {
    let mut alloc = expandable(5 * MIB);
    alloc.allocate(4 * MIB, Tag::WEIGHTS).unwrap();
    // Needs one more step but only 1 MiB of headroom is left: it grows by that and fits.
    alloc.allocate(MIB, Tag::WEIGHTS).unwrap();
    assert_eq!(alloc.reserved(), 5 * MIB);
    let err = alloc.allocate(256, Tag::WEIGHTS).unwrap_err();
    assert_eq!(err.oom_report().unwrap().verdict, Verdict::Capacity);
}

#[test]
fn stats_and_reports_say_how_memory_is_reserved() {
    let space = || VirtualMemory::new(64 * MIB);
    let cases = [
        (
            Growth::OnDemand,
            space(),
            Reservation::InPlace { step: 2 * MIB },
        ),
        (
            Growth::OnDemand,
            space().with_growth_step(4096),
            Reservation::InPlace { step: 4096 },
        ),
        (
            Growth::OnDemand,
            space().fixed_regions(),
            Reservation::Segments,
        ),
        (
            Growth::Expandable,
            space().fixed_regions(),
            Reservation::Steps { step: 2 * MIB },
        ),
        (Growth::Preallocate, space(), Reservation::Preallocated),
    ];
    for (growth, source, expected) in cases {
        let config = AllocatorConfig::default().with_growth(growth);
        let mut alloc = Allocator::new(source, config).unwrap();
        alloc.allocate(MIB, Tag::OTHER).unwrap();
        assert_eq!(alloc.stats().reservation, expected);
        let err = alloc.allocate(64 * MIB, Tag::OTHER).unwrap_err();
        let report = err.oom_report().unwrap();
        assert_eq!(report.reservation, expected);
        let text = report.to_string();
        assert!(text.contains(&format!("reserved as {expected}")), "{text}");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn host_pages_grow_in_place_by_the_page_and_give_the_tail_back() {
    use headroom_alloc::HostPages;
    let page = HostPages::new(0).growth_step();
    let mut alloc = Allocator::new(HostPages::new(64 * MIB), AllocatorConfig::default()).unwrap();
    let a = alloc.allocate(3 * MIB + 100, Tag::OTHER).unwrap();
    let b = alloc.allocate(MIB, Tag::OTHER).unwrap();
    // One region, as large as the two requests rounded up to a page.
    assert_eq!(alloc.stats().regions, 1);
    assert_eq!(alloc.reserved(), (4 * MIB + 256).div_ceil(page) * page);
    assert_eq!(b.addr, a.addr + 3 * MIB + 256);
    // SAFETY: `b` is a live allocation of 1 MiB of real host memory.
    let bytes = unsafe { std::slice::from_raw_parts_mut(b.addr as *mut u8, MIB as usize) };
    bytes.fill(1);
    alloc.free(b.addr).unwrap();
    assert_eq!(alloc.release_cached(), MIB / page * page);
    assert_eq!(alloc.reserved(), (3 * MIB + 256).div_ceil(page) * page);
}
