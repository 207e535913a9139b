//! Streaming a complete allocation trace from a running allocator, and replaying it.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use headroom_alloc::trace::{
    TraceOp, TraceSettings, TraceWriter, TransformerTrace, find_limit, read_trace,
    read_trace_with_settings, replay,
};
use headroom_alloc::{
    Allocator, AllocatorConfig, Error, Growth, OomCause, Tag, Verdict, VirtualMemory,
};

const LIMIT: u64 = 64 << 20;

/// A writer into a buffer the test keeps a handle on.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().write(bytes)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A writer that takes `left` bytes, then fails every write and flush.
struct FailingAfter {
    left: usize,
}

impl Write for FailingAfter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
        }
        let taken = bytes.len().min(self.left);
        self.left -= taken;
        Ok(taken)
    }
    fn flush(&mut self) -> io::Result<()> {
        match self.left {
            0 => Err(io::Error::new(io::ErrorKind::StorageFull, "disk full")),
            _ => Ok(()),
        }
    }
}

/// What a run saw: allocations, frees, and each real OOM's (size, tag, verdict).
#[derive(Debug, Default, PartialEq)]
struct Seen {
    allocs: u64,
    frees: u64,
    ooms: Vec<(u64, Tag, Verdict)>,
}

/// Runs `ops` as a program would: workspace through `try_allocate`, the rest through
/// `allocate`, skipping the frees of what failed.
fn execute(alloc: &mut Allocator, ops: &[TraceOp]) -> Seen {
    let mut live = HashMap::new();
    let mut seen = Seen::default();
    for op in ops {
        match *op {
            TraceOp::Alloc { id, size, tag } if tag == Tag::WORKSPACE => {
                if let Some(a) = alloc.try_allocate(size, tag) {
                    live.insert(id, a.addr);
                    seen.allocs += 1;
                }
            }
            TraceOp::Alloc { id, size, tag } => match alloc.allocate(size, tag) {
                Ok(a) => {
                    live.insert(id, a.addr);
                    seen.allocs += 1;
                }
                Err(Error::OutOfMemory(report)) if report.cause == OomCause::Injected => {}
                Err(Error::OutOfMemory(report)) => seen.ooms.push((size, tag, report.verdict)),
                Err(other) => panic!("{other}"),
            },
            TraceOp::Free { id } => {
                if let Some(addr) = live.remove(&id) {
                    alloc.free(addr).unwrap();
                    seen.frees += 1;
                }
            }
            TraceOp::Oom { .. } => panic!("a generated trace records no failed request"),
        }
    }
    seen
}

#[test]
fn a_streamed_trace_replays_to_the_same_allocations_frees_ooms_and_peaks() {
    let ops = TransformerTrace::default().generate();
    // One region of the whole limit, so that some OOMs are for fragmentation.
    let config = AllocatorConfig::default()
        .with_limit_bytes(LIMIT)
        .with_growth(Growth::Preallocate);
    let mut alloc = Allocator::new(VirtualMemory::new(LIMIT), config.clone()).unwrap();
    let text = Shared::default();
    assert!(
        alloc
            .stream_trace(Some(TraceWriter::new(text.clone())))
            .is_none()
    );
    // An injected OOM is not written: a replay could not fail there.
    alloc.inject_oom(40);
    let seen = execute(&mut alloc, &ops);
    alloc.flush_trace().unwrap();
    let writer = alloc.stream_trace(None).unwrap();
    assert_eq!(
        writer.written(),
        seen.allocs + seen.ooms.len() as u64 + seen.frees
    );
    writer.finish().unwrap();
    assert!(seen.ooms.len() > 10, "the limit must cause OOMs: {seen:?}");
    assert!(
        seen.ooms.iter().any(|oom| oom.2 == Verdict::Fragmentation),
        "{seen:?}"
    );

    let written = read_trace(&text.0.lock().unwrap()[..]).unwrap();
    let mut live_ids = std::collections::HashSet::new();
    for op in &written {
        match *op {
            TraceOp::Alloc { id, .. } => assert!(live_ids.insert(id), "id {id} reused"),
            TraceOp::Free { id } => assert!(live_ids.remove(&id), "id {id} is not live"),
            TraceOp::Oom { .. } => {}
        }
    }
    let replayed = replay(&written, config, LIMIT).unwrap();
    let stats = alloc.stats();
    assert_eq!(replayed.allocs, seen.allocs);
    assert_eq!(replayed.frees, seen.frees);
    assert_eq!(replayed.peak_in_use, stats.peak_in_use);
    assert_eq!(replayed.peak_reserved, stats.peak_reserved);
    let replayed_ooms: Vec<_> = replayed
        .oom_events
        .iter()
        .map(|event| (event.requested, event.tag, event.verdict))
        .collect();
    assert_eq!(replayed_ooms, seen.ooms);
}

#[test]
fn a_failing_writer_never_breaks_allocation_and_its_error_comes_back_from_flush() {
    let ops = TransformerTrace::default().generate();
    let config = AllocatorConfig::default().with_limit_bytes(LIMIT);
    let mut plain = Allocator::new(VirtualMemory::new(LIMIT), config.clone()).unwrap();
    let mut alloc = Allocator::new(VirtualMemory::new(LIMIT), config).unwrap();
    // Fails partway through the buffer's first write-out, some 200 operations in.
    alloc.stream_trace(Some(TraceWriter::new(FailingAfter { left: 1000 })));
    let mut operations = 0;
    for _ in 0..10 {
        let seen = execute(&mut alloc, &ops);
        assert_eq!(seen, execute(&mut plain, &ops));
        operations += seen.allocs + seen.ooms.len() as u64 + seen.frees;
    }
    assert_eq!(alloc.stats(), plain.stats());
    for _ in 0..2 {
        let err = alloc.flush_trace().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert!(err.to_string().contains("disk full"), "{err}");
        assert!(err.to_string().contains("stopped after"), "{err}");
    }
    let writer = alloc.stream_trace(None).unwrap();
    assert!(writer.error().is_some());
    assert!(
        writer.written() < operations / 2,
        "{writer:?} of {operations}"
    );
    assert!(writer.finish().is_err());
    // Without a writer there is nothing to flush.
    alloc.flush_trace().unwrap();

    // An error that only the final write-out meets comes back from `finish`.
    let mut alloc =
        Allocator::new(VirtualMemory::new(1 << 20), AllocatorConfig::default()).unwrap();
    alloc.stream_trace(Some(TraceWriter::new(FailingAfter { left: 10 })));
    let a = alloc.allocate(256, Tag::OTHER).unwrap();
    alloc.free(a.addr).unwrap();
    let err = alloc.stream_trace(None).unwrap().finish().unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::StorageFull);
}

#[test]
fn a_shared_allocator_streams_through_with() {
    let alloc = headroom_alloc::SharedAllocator::new(
        Allocator::new(VirtualMemory::new(1 << 20), AllocatorConfig::default()).unwrap(),
    );
    // Allocations made before streaming starts are not in the trace, nor are their frees.
    let early = alloc.allocate(4096, Tag::DATA).unwrap();
    let text = Shared::default();
    alloc.with(|a| a.stream_trace(Some(TraceWriter::new(text.clone()))));
    drop(early);
    drop(
        alloc
            .allocate(1000, Tag::named("kv cache \"v2\"").unwrap())
            .unwrap(),
    );
    alloc.with(Allocator::flush_trace).unwrap();
    let ops = read_trace(&text.0.lock().unwrap()[..]).unwrap();
    assert_eq!(
        ops,
        [
            TraceOp::Alloc {
                id: 0,
                size: 1000,
                tag: Tag::named("kv cache \"v2\"").unwrap()
            },
            TraceOp::Free { id: 0 }
        ]
    );
}

#[test]
fn failed_requests_are_recorded_as_such_and_a_replay_under_the_recorded_settings_reproduces_them() {
    let ops = TransformerTrace::default().generate();
    let config = AllocatorConfig::default()
        .with_limit_bytes(LIMIT)
        .with_growth(Growth::Preallocate)
        .with_max_internal_fragmentation(256);
    let mut alloc = Allocator::new(VirtualMemory::new(LIMIT), config.clone()).unwrap();
    let text = Shared::default();
    alloc.stream_trace(Some(TraceWriter::new(text.clone())));
    let seen = execute(&mut alloc, &ops);
    alloc.stream_trace(None).unwrap().finish().unwrap();
    let run = alloc.stats();
    assert!(seen.ooms.len() > 10, "the limit must cause OOMs: {seen:?}");

    let (settings, written) =
        read_trace_with_settings(&text.0.lock().unwrap()[..]).expect("the trace reads back");
    let settings = settings.expect("the trace gives the allocator's settings");
    assert_eq!(
        settings,
        TraceSettings {
            limit: LIMIT,
            growth: Growth::Preallocate,
            growth_step: 2 << 20,
            max_internal_fragmentation: 256,
            garbage_collection: true,
        }
    );
    let failed: Vec<(u64, Tag)> = written
        .iter()
        .filter_map(|(_, op)| match *op {
            TraceOp::Oom { size, tag } => Some((size, tag)),
            _ => None,
        })
        .collect();
    let expected: Vec<(u64, Tag)> = seen.ooms.iter().map(|oom| (oom.0, oom.1)).collect();
    assert_eq!(failed, expected, "each failed request is recorded as one");

    // Under the recorded settings: the same OOMs and the same peaks.
    let same = replay(&written, settings.allocator_config(), settings.limit).unwrap();
    assert_eq!(
        (same.ooms, same.recorded_ooms, same.recorded_ooms_fitted),
        (seen.ooms.len() as u64, seen.ooms.len() as u64, 0)
    );
    assert!(same.oom_events.iter().all(|event| event.recorded));
    assert_eq!(same.peak_in_use, run.peak_in_use);
    assert_eq!(same.peak_reserved, run.peak_reserved);
    assert_eq!(same.allocs, seen.allocs);

    // Under a larger limit the failed requests fit, and nothing keeps them.
    let roomy = replay(
        &written,
        config.clone().with_limit_bytes(4 * LIMIT),
        4 * LIMIT,
    )
    .unwrap();
    assert_eq!(roomy.ooms, 0);
    assert_eq!(roomy.recorded_ooms_fitted, seen.ooms.len() as u64);
    assert_eq!(roomy.final_stats.unwrap().in_use, run.in_use);

    // What the program held fits under the limit it ran under.
    let search = find_limit(&written, settings.allocator_config()).unwrap();
    assert!(
        search.limit <= LIMIT,
        "{} above the run's limit {LIMIT}",
        search.limit
    );
}
