//! A Headroom trace written as a PyTorch memory snapshot reads back with every event of its
//! replay's history: each allocation an `alloc`, each free a `free_requested` and a
//! `free_completed`, each region a segment event, each failed request an `oom`, every tag its
//! category; and the snapshot replays to the peaks of the trace it came from. A PyTorch
//! snapshot written the same way holds its blocks where headroom-alloc's replay put them.

use std::path::PathBuf;

use headroom_alloc::pytorch::{
    Action, AllocationStream, DeviceTrace, Event, Snapshot, write_snapshot_replay_memory_viz,
    write_trace_memory_viz,
};
use headroom_alloc::trace::{TraceOp, TraceSettings, TransformerTrace, replay_with_growth_step};
use headroom_alloc::{AllocatorConfig, EventKind, Growth, Tag};

fn out(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("headroom-viz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The settings of a replay under `growth` and `limit`, in CUDA's 2 MiB steps.
fn settings(growth: Growth, limit: u64) -> TraceSettings {
    TraceSettings::of(
        &AllocatorConfig::default().with_growth(growth),
        limit,
        headroom_alloc::EXPANSION_STEP,
    )
}

/// The snapshot's actions and their addresses and sizes, as the history says they must be.
fn expected_actions(ops: &[TraceOp], settings: &TraceSettings) -> Vec<(Action, u64, u64)> {
    let config = settings.allocator_config().with_history(usize::MAX);
    let replay =
        replay_with_growth_step(ops, config, settings.limit, settings.growth_step).unwrap();
    let mut actions = Vec::new();
    for event in replay.history.unwrap().events() {
        match event.kind {
            EventKind::Alloc => actions.push((Action::Alloc, event.addr, event.size)),
            EventKind::Free => {
                actions.push((Action::FreeRequested, event.addr, event.size));
                actions.push((Action::FreeCompleted, event.addr, event.size));
            }
            // Whether a region event is a segment's or a map's, the snapshot decides.
            EventKind::RegionReserve => {
                actions.push((Action::SegmentAlloc, event.addr, event.size))
            }
            EventKind::RegionRelease => actions.push((Action::SegmentFree, event.addr, event.size)),
            EventKind::Oom => actions.push((Action::Oom, 0, event.requested)),
        }
    }
    actions
}

/// The snapshot's events as (action, addr, size), segment maps counted as segment events and
/// an `oom`'s address (the device's free bytes) left out.
fn read_actions(snapshot: &Snapshot) -> Vec<(Action, u64, u64)> {
    snapshot.devices[0]
        .events
        .iter()
        .map(|e| match e.action {
            Action::SegmentMap => (Action::SegmentAlloc, e.addr, e.size),
            Action::SegmentUnmap => (Action::SegmentFree, e.addr, e.size),
            Action::Oom => (Action::Oom, 0, e.size),
            action => (action, e.addr, e.size),
        })
        .collect()
}

#[test]
fn a_replayed_training_trace_keeps_every_event_and_its_peaks() {
    let ops = TransformerTrace::default().generate();
    for growth in [Growth::OnDemand, Growth::Expandable] {
        let settings = settings(growth, 64 << 20);
        let path = out(&format!("transformer-{growth:?}.pickle"));
        let counts = write_trace_memory_viz(&ops, &settings, &path).unwrap();
        let snapshot = Snapshot::read(&path).unwrap();
        assert_eq!(snapshot.devices.len(), 1);
        let trace = &snapshot.devices[0];
        assert_eq!(trace.events.len(), counts.events());
        assert_eq!(read_actions(&snapshot), expected_actions(&ops, &settings));

        // The snapshot's stream is the trace's: it replays to the same peaks, and PyTorch's
        // reserved bytes, read from its segment events, are the replay's.
        let original = replay_with_growth_step(
            &ops,
            settings.allocator_config(),
            settings.limit,
            settings.growth_step,
        )
        .unwrap();
        let stream = AllocationStream::of(trace);
        assert_eq!(stream.held_before, 0);
        let again = replay_with_growth_step(
            &stream.ops,
            settings.allocator_config(),
            settings.limit,
            settings.growth_step,
        )
        .unwrap();
        assert_eq!(
            (again.peak_in_use, again.peak_reserved),
            (original.peak_in_use, original.peak_reserved),
            "{growth:?}"
        );
        assert_eq!(stream.torch_reserved_peak, Some(original.peak_reserved));
        let end = original.final_stats.unwrap();
        assert_eq!(trace.segments_at_end, end.reserved);
        assert_eq!(counts.segments, end.regions);
    }
}

#[test]
fn tags_and_failed_requests_come_back() {
    let kv = Tag::named("kv_cache").unwrap();
    let ops = [
        TraceOp::Alloc {
            id: 1,
            size: 3 << 20,
            tag: Tag::WEIGHTS,
        },
        TraceOp::Alloc {
            id: 2,
            size: 1000,
            tag: kv,
        },
        TraceOp::Oom {
            size: 1 << 30,
            tag: Tag::ACTIVATIONS,
        },
        TraceOp::Alloc {
            id: 3,
            size: 5 << 20,
            tag: Tag::WORKSPACE,
        },
        TraceOp::Free { id: 3 },
    ];
    let settings = settings(Growth::OnDemand, 16 << 20);
    let path = out("tags.pickle");
    let counts = write_trace_memory_viz(&ops, &settings, &path).unwrap();
    assert_eq!((counts.allocs, counts.frees, counts.ooms), (3, 1, 1));
    let snapshot = Snapshot::read(&path).unwrap();
    let trace = &snapshot.devices[0];
    let stream = AllocationStream::of(trace);
    let tags: Vec<Tag> = stream
        .ops
        .iter()
        .filter_map(|op| match op.op {
            TraceOp::Alloc { tag, .. } | TraceOp::Oom { tag, .. } => Some(tag),
            TraceOp::Free { .. } => None,
        })
        .collect();
    assert_eq!(tags, [Tag::WEIGHTS, kv, Tag::ACTIVATIONS, Tag::WORKSPACE]);
    let categories = |blocks: bool| -> Vec<&str> {
        let of_block = |e: &&Event| matches!(e.action, Action::Alloc | Action::Oom) == blocks;
        trace
            .events
            .iter()
            .filter(of_block)
            .filter_map(|e| e.category.as_deref())
            .collect()
    };
    assert_eq!(
        categories(true),
        ["parameter", "kv_cache", "activation", "temporary"]
    );
    // A segment's is `unknown`, which the viewer expects among the categories.
    assert!(categories(false).iter().all(|c| *c == "unknown"));
    assert!(!categories(false).is_empty());
    assert_eq!(
        stream.torch_oom,
        trace.events.iter().position(|e| e.action == Action::Oom)
    );
    // The weights and the kv cache are held at the end, the workspace was freed.
    let held: u64 = 3 << 20;
    assert!(trace.segments_at_end >= held + 1024);
}

#[test]
fn a_pytorch_snapshot_is_written_as_headroom_alloc_places_its_blocks() {
    let input = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/torch-cpu-step.pickle");
    let snapshot = Snapshot::read(&input).unwrap();
    let stream = AllocationStream::of(&snapshot.devices[0]);
    let path = out("replayed.pickle");
    let counts =
        write_snapshot_replay_memory_viz(&snapshot, Growth::Expandable, None, &path).unwrap();
    let written = Snapshot::read(&path).unwrap();
    let trace = &written.devices[0];
    assert_eq!(trace.device, snapshot.devices[0].device);
    // Every block of the program, those from before its trace included, allocated in order.
    let allocs = |trace: &DeviceTrace| {
        trace
            .events
            .iter()
            .filter(|e| e.action == Action::Alloc)
            .count()
    };
    assert_eq!(
        allocs(trace),
        allocs(&snapshot.devices[0]) + stream.held_before
    );
    assert_eq!(counts.allocs, allocs(trace));
    let again = AllocationStream::of(trace);
    assert_eq!(again.held_before, 0);
    // The blocks are the replay's chunks: the most held at once is its peak in use.
    let replay = replay_with_growth_step(
        &stream.ops,
        AllocatorConfig::default().with_growth(Growth::Expandable),
        stream.room_for_all(),
        headroom_alloc::EXPANSION_STEP,
    )
    .unwrap();
    assert_eq!(again.peak_requested, replay.peak_in_use);
    assert_eq!(again.torch_reserved_peak, Some(replay.peak_reserved));
}
