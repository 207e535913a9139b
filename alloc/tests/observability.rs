//! History, Perfetto export and memory snapshots.

use headroom_alloc::{
    Allocator, AllocatorConfig, EventKind, HostMemory, MemorySnapshot, Tag, VirtualMemory,
};

#[test]
fn history_records_every_kind_of_event_with_running_totals() {
    let config = AllocatorConfig::default()
        .with_limit_bytes(8 << 20)
        .with_history(1000);
    let mut alloc = Allocator::new(VirtualMemory::new(8 << 20), config).unwrap();
    let a = alloc.allocate(1000, Tag::WEIGHTS).unwrap();
    let b = alloc.allocate(2 << 20, Tag::ACTIVATIONS).unwrap();
    alloc.free(b.addr).unwrap();
    alloc.allocate(16 << 20, Tag::ACTIVATIONS).unwrap_err();
    alloc.release_cached();
    let history = alloc.history().unwrap();
    let kinds: Vec<EventKind> = history.events().map(|e| e.kind).collect();
    use EventKind::*;
    assert_eq!(
        kinds,
        [
            RegionReserve,
            Alloc,
            RegionReserve,
            Alloc,
            Free,
            Oom,
            RegionRelease
        ]
    );
    let events: Vec<_> = history.events().collect();
    assert_eq!(
        (events[1].addr, events[1].size, events[1].requested),
        (a.addr, 1024, 1000)
    );
    assert_eq!(events[3].in_use, 1024 + (2 << 20));
    assert_eq!(events[3].tag_live, 2 << 20);
    assert_eq!(events[4].in_use, 1024);
    assert!(events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    assert_eq!(events[6].reserved, 2 << 20);

    let mut trace = Vec::new();
    history.write_chrome_trace(&mut trace).unwrap();
    let value: serde_json::Value = serde_json::from_slice(&trace).unwrap();
    let names: Vec<&str> = value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for name in [
        "in use",
        "reserved",
        "tag weights",
        "tag activations",
        "out of memory",
    ] {
        assert!(names.contains(&name), "no {name:?} track");
    }
}

#[test]
fn recording_can_be_switched_on_later_and_is_off_by_default() {
    let mut alloc =
        Allocator::new(VirtualMemory::new(1 << 20), AllocatorConfig::default()).unwrap();
    alloc.allocate(256, Tag::OTHER).unwrap();
    assert!(alloc.history().is_none());
    alloc.record_history(2);
    for _ in 0..3 {
        alloc.allocate(256, Tag::OTHER).unwrap();
    }
    let history = alloc.history().unwrap();
    assert_eq!((history.events().len(), history.dropped()), (2, 1));
}

#[test]
fn snapshots_serialize_and_tile_every_region() {
    // Host memory does not grow in place, so the 3 MiB request takes a region of its own.
    let mut alloc = Allocator::new(HostMemory::new(64 << 20), AllocatorConfig::default()).unwrap();
    let blocks: Vec<_> = (0..10)
        .map(|i| alloc.allocate(1000 * (i + 1), Tag::ACTIVATIONS).unwrap())
        .collect();
    alloc.allocate(3 << 20, Tag::WEIGHTS).unwrap();
    for block in blocks.iter().step_by(3) {
        alloc.free(block.addr).unwrap();
    }
    let snapshot = alloc.snapshot();
    assert_eq!(snapshot.regions.len(), 2);
    for region in &snapshot.regions {
        let mut addr = region.base;
        for chunk in &region.chunks {
            assert_eq!(chunk.addr, addr);
            assert_eq!(chunk.tag.is_some(), chunk.in_use);
            addr += chunk.size;
        }
        assert_eq!(addr, region.base + region.size);
    }
    let live: u64 = snapshot.chunks().filter(|c| c.in_use).map(|c| c.size).sum();
    assert_eq!(live, alloc.stats().in_use);
    let json = serde_json::to_string(&snapshot).unwrap();
    let back: MemorySnapshot = serde_json::from_str(&json).unwrap();
    assert_eq!(back, snapshot);
}

#[test]
fn an_injected_oom_fails_once_changes_nothing_and_says_it_was_injected() {
    use headroom_alloc::{Error, OomCause};
    let mut alloc =
        Allocator::new(VirtualMemory::new(8 << 20), AllocatorConfig::default()).unwrap();
    let kept = alloc.allocate(1000, Tag::WEIGHTS).unwrap();
    let before = alloc.stats();
    alloc.inject_oom(1);
    let second = alloc.allocate(1000, Tag::ACTIVATIONS).unwrap();
    let err = alloc.allocate(1000, Tag::ACTIVATIONS).unwrap_err();
    let Error::OutOfMemory(report) = &err else {
        panic!("expected an OOM, got {err}")
    };
    assert_eq!(report.cause, OomCause::Injected);
    let text = report.to_string();
    assert!(
        text.contains("verdict: none. This OOM was injected"),
        "{text}"
    );
    alloc.free(second.addr).unwrap();
    assert_eq!(alloc.stats().in_use, before.in_use);
    alloc.allocate(1000, Tag::ACTIVATIONS).unwrap();
    alloc.free(kept.addr).unwrap();
    alloc.validate().unwrap();
}

#[test]
fn a_full_history_keeps_every_oom_and_says_what_it_dropped() {
    let config = AllocatorConfig::default()
        .with_limit_bytes(1 << 20)
        .with_history(3);
    let mut alloc = Allocator::new(VirtualMemory::new(1 << 20), config).unwrap();
    for round in 0..5 {
        alloc.allocate(2 << 20, Tag::ACTIVATIONS).unwrap_err();
        for _ in 0..=round {
            let a = alloc.allocate(1000, Tag::WEIGHTS).unwrap();
            alloc.free(a.addr).unwrap();
        }
    }
    let history = alloc.history().unwrap();
    let kinds: Vec<EventKind> = history.events().map(|e| e.kind).collect();
    // Five OOMs (four of them evicted from the ring and kept aside), then the last three events.
    use EventKind::*;
    assert_eq!(kinds, [Oom, Oom, Oom, Oom, Oom, Free, Alloc, Free]);
    let events: Vec<_> = history.events().collect();
    assert!(events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    // One region reserve, 15 allocations and 15 frees, 5 OOMs: 36 events, 8 kept.
    assert_eq!(history.dropped(), 28);
    let until = history.dropped_until_ns().unwrap();
    assert!(until <= events[5].time_ns);

    let mut trace = Vec::new();
    history.write_chrome_trace(&mut trace).unwrap();
    let value: serde_json::Value = serde_json::from_slice(&trace).unwrap();
    assert_eq!(value["otherData"]["dropped_events"], 28);
    assert_eq!(value["otherData"]["dropped_until_ns"], until);
    assert_eq!(value["traceEvents"][0]["name"], "28 earlier events dropped");
    let ooms = value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "out of memory")
        .count();
    assert_eq!(ooms, 5);
}
