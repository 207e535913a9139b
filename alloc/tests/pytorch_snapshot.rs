//! PyTorch memory snapshots: a real one (a CPU training step's, recorded by PyTorch's profiler
//! and turned into the snapshot format by `torch.cuda._memory_viz`, made by
//! scripts/pytorch/make_memory_snapshot.py) replays to the figures it implies; a GPU-shaped one
//! with segments and an out-of-memory says what PyTorch reserved and why the request failed;
//! what is not a snapshot is a clear error.

use std::collections::BTreeMap;
use std::path::PathBuf;

use headroom_alloc::pytorch::{AllocationStream, SNAPSHOT_POLICIES, Snapshot, replay_snapshot};
use headroom_alloc::trace::TraceOp;
use headroom_alloc::{Error, Tag, Verdict};
use serde::Serialize;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// What make_memory_snapshot.py computed from the snapshot's events, device "0".
fn implied() -> serde_json::Value {
    let text = std::fs::read_to_string(data("torch-cpu-step.json")).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["devices"]["0"].clone()
}

#[test]
fn a_recorded_training_step_replays_to_the_figures_it_implies() {
    let snapshot = Snapshot::read(&data("torch-cpu-step.pickle")).unwrap();
    assert_eq!(snapshot.devices.len(), 1, "the CPU's trace alone");
    let expected = implied();
    let report = replay_snapshot(&snapshot, &SNAPSHOT_POLICIES, None, true).unwrap();
    let device = &report.devices[0];
    assert_eq!(device.events as u64, expected["events"].as_u64().unwrap());
    assert_eq!(device.allocs as u64, expected["allocs"].as_u64().unwrap());
    assert_eq!(
        device.peak_requested,
        expected["peak_requested"].as_u64().unwrap()
    );
    assert_eq!(
        device.torch_reserved_peak, None,
        "a profiler's trace has no segments"
    );
    for replay in &device.replays {
        // Each request rounded up to the 256-byte granule, no more.
        let rounding = 255 * device.allocs as u64;
        assert!(
            replay.peak_in_use >= device.peak_requested
                && replay.peak_in_use <= device.peak_requested + rounding,
            "{replay:?}"
        );
        assert_eq!(replay.ooms, 0, "room for every block at once");
        // At the program's peak the allocator holds its blocks, rounded, and no more.
        let at_peak = &replay.at_peak;
        assert!(
            at_peak.in_use >= device.peak_requested
                && at_peak.in_use <= device.peak_requested + rounding
                && at_peak.reserved >= at_peak.in_use
                && at_peak.reserved - at_peak.in_use >= at_peak.largest_free,
            "{at_peak:?}"
        );
        let search = replay.smallest_limit.as_ref().unwrap();
        assert!(search.limit >= search.packed_peak && search.packed_peak >= device.peak_requested);
    }
    let text = report.to_string();
    assert!(
        text.contains("peak requested") && text.contains("expandable"),
        "{text}"
    );
}

#[test]
fn the_profilers_categories_become_tags() {
    let snapshot = Snapshot::read(&data("torch-cpu-step.pickle")).unwrap();
    let stream = AllocationStream::of(&snapshot.devices[0]);
    let count = |wanted: Tag| {
        let tags = stream.ops.iter().filter_map(|op| match op.op {
            TraceOp::Alloc { tag, .. } => Some(tag),
            _ => None,
        });
        tags.filter(|&tag| tag == wanted).count()
    };
    // AdamW's moments, the model's weights, their gradients, the step's activations.
    for tag in [
        Tag::OPTIMIZER_STATE,
        Tag::WEIGHTS,
        Tag::GRADIENTS,
        Tag::ACTIVATIONS,
    ] {
        assert!(count(tag) > 0, "no block tagged {tag}");
    }
}

#[test]
fn a_recorded_stacks_layer_becomes_the_tag() {
    let frame = |filename: &'static str, name: &'static str| {
        BTreeMap::from([("filename", filename), ("name", name), ("line", "1")])
    };
    let linear = frame(
        "/opt/lib/python3.12/site-packages/torch/nn/modules/linear.py",
        "forward",
    );
    let script = frame("train.py", "main");
    let mut events = vec![
        Event {
            frames: vec![linear, script.clone()],
            ..event("alloc", 0x1000, 4096)
        },
        Event {
            frames: vec![script],
            ..event("alloc", 0x2000, 4096)
        },
    ];
    events.push(event("free_completed", 0x1000, 4096));
    let bytes = pickled(&RawSnapshot {
        segments: Vec::new(),
        device_traces: vec![events],
    });
    let snapshot = Snapshot::from_bytes(&bytes).unwrap();
    let tags: Vec<Tag> = AllocationStream::of(&snapshot.devices[0])
        .ops
        .iter()
        .filter_map(|op| match op.op {
            TraceOp::Alloc { tag, .. } => Some(tag),
            _ => None,
        })
        .collect();
    assert_eq!(tags, [Tag::named("linear").unwrap(), Tag::OTHER]);
}

/// An event as PyTorch's caching allocator records it.
#[derive(Serialize)]
struct Event {
    action: &'static str,
    addr: u64,
    size: u64,
    stream: u64,
    frames: Vec<BTreeMap<&'static str, &'static str>>,
}

fn event(action: &'static str, addr: u64, size: u64) -> Event {
    Event {
        action,
        addr,
        size,
        stream: 0,
        frames: Vec::new(),
    }
}

#[derive(Serialize)]
struct Segment {
    device: i64,
    address: u64,
    total_size: u64,
}

#[derive(Serialize)]
struct RawSnapshot {
    segments: Vec<Segment>,
    device_traces: Vec<Vec<Event>>,
}

fn pickled(value: &impl Serialize) -> Vec<u8> {
    serde_pickle::to_vec(value, serde_pickle::SerOptions::new()).unwrap()
}

const MIB: u64 = 1 << 20;

/// A GPU's trace: one 2 MiB segment, 1 MiB then 512 KiB allocated, the first freed, then a
/// 1.5 MiB request that PyTorch could not place; one block was allocated before the trace.
fn gpu_trace() -> Vec<u8> {
    let base = 0x7f00_0000_0000;
    let events = vec![
        event("free_requested", base + 3 * MIB, 4096),
        event("free_completed", base + 3 * MIB, 4096),
        event("segment_alloc", base, 2 * MIB),
        event("alloc", base, MIB),
        event("alloc", base + MIB, MIB / 2),
        event("free_requested", base, MIB),
        event("free_completed", base, MIB),
        event("oom", 0, 3 * MIB / 2),
    ];
    pickled(&RawSnapshot {
        segments: vec![Segment {
            device: 0,
            address: base,
            total_size: 2 * MIB,
        }],
        device_traces: vec![events],
    })
}

#[test]
fn a_gpu_trace_says_what_pytorch_reserved_and_why_its_request_failed() {
    let snapshot = Snapshot::from_bytes(&gpu_trace()).unwrap();
    let stream = AllocationStream::of(&snapshot.devices[0]);
    assert_eq!(stream.held_before, 1);
    assert_eq!(stream.torch_reserved_peak, Some(2 * MIB));
    assert_eq!(stream.torch_oom, Some(7));
    assert_eq!(stream.peak_requested, 3 * MIB / 2);
    // Under PyTorch's 2 MiB: 1.5 MiB is free in all after the first block goes, in two
    // pieces, so the request fails by fragmentation, as it did for PyTorch.
    let report = replay_snapshot(&snapshot, &SNAPSHOT_POLICIES, Some(2 * MIB), false).unwrap();
    let device = &report.devices[0];
    assert_eq!(device.torch_oom_event, Some(7));
    assert_eq!(device.torch_reserved_at_end, Some(2 * MIB));
    let default = &device.replays[0];
    // The program held the most once both blocks were allocated, event 4.
    assert_eq!(default.at_peak.event, 4);
    assert_eq!(default.at_peak.in_use, 3 * MIB / 2);
    assert_eq!(
        default.first_oom,
        Some((7, Verdict::Fragmentation)),
        "{default:?}"
    );
    // With room for it, the request is tried and fits.
    let roomy = replay_snapshot(&snapshot, &SNAPSHOT_POLICIES, Some(4 * MIB), false).unwrap();
    assert!(roomy.devices[0].replays.iter().all(|r| r.ooms == 0));
}

#[test]
fn devices_and_streams_are_kept_apart() {
    let side = 0x5555_0000;
    let on = |stream: u64, e: Event| Event { stream, ..e };
    // Device 0: 1 MiB on the default stream, and on a side stream 2 MiB then 512 KiB while
    // the first is held; device 1: one 4 MiB block.
    let device_0 = vec![
        event("alloc", 0x1000_0000, MIB),
        on(side, event("alloc", 0x2000_0000, 2 * MIB)),
        on(side, event("alloc", 0x2020_0000, MIB / 2)),
        on(side, event("free_completed", 0x2000_0000, 2 * MIB)),
        event("free_completed", 0x1000_0000, MIB),
    ];
    let device_1 = vec![event("alloc", 0x3000_0000, 4 * MIB)];
    let bytes = pickled(&RawSnapshot {
        segments: Vec::new(),
        device_traces: vec![device_0, device_1],
    });
    let snapshot = Snapshot::from_bytes(&bytes).unwrap();
    let report = replay_snapshot(&snapshot, &SNAPSHOT_POLICIES, None, false).unwrap();
    let [first, second] = &report.devices[..] else {
        panic!("two devices, read {:?}", report.devices);
    };
    assert_eq!((first.device, second.device), (0, 1));
    assert_eq!(first.peak_requested, 3 * MIB + MIB / 2);
    assert_eq!(second.peak_requested, 4 * MIB);
    let streams: Vec<(u64, usize, u64)> = first
        .streams
        .iter()
        .map(|s| (s.stream, s.blocks, s.peak_requested))
        .collect();
    assert_eq!(streams, [(0, 1, MIB), (side, 2, 2 * MIB + MIB / 2)]);
    let text = report.to_string();
    assert!(text.contains("stream 0x55550000"), "{text}");
    assert_eq!(second.streams.len(), 1);
}

#[test]
fn what_is_not_a_replayable_snapshot_is_a_clear_error() {
    let gpu = gpu_trace();
    let truncated = Snapshot::from_bytes(&gpu[..gpu.len() / 2]).unwrap_err();
    assert!(
        truncated.contains("not a PyTorch memory snapshot"),
        "{truncated}"
    );
    let foreign = Snapshot::from_bytes(&pickled(&vec![1, 2, 3])).unwrap_err();
    assert!(
        foreign.contains("not a PyTorch memory snapshot"),
        "{foreign}"
    );
    let text = Snapshot::from_bytes(b"{\"op\":\"alloc\"}").unwrap_err();
    assert!(text.contains("not a pickle"), "{text}");
    let unrecorded = pickled(&RawSnapshot {
        segments: Vec::new(),
        device_traces: vec![Vec::new()],
    });
    let missing = Snapshot::from_bytes(&unrecorded).unwrap_err();
    assert!(missing.contains("_record_memory_history"), "{missing}");
    let unknown = pickled(&RawSnapshot {
        segments: Vec::new(),
        device_traces: vec![vec![event("alloc", 0, 256), event("defragment", 0, 0)]],
    });
    let action = Snapshot::from_bytes(&unknown).unwrap_err();
    assert!(
        action.contains("event 1 of device 0's trace: unknown action `defragment`"),
        "{action}"
    );
    // From a file, the error names it.
    let path =
        std::env::temp_dir().join(format!("headroom-snapshot-{}.pickle", std::process::id()));
    std::fs::write(&path, &unrecorded).unwrap();
    let err = Snapshot::read(&path).unwrap_err();
    assert!(
        matches!(err, Error::Snapshot { .. })
            && err.to_string().contains(&path.display().to_string())
    );
    std::fs::remove_file(&path).ok();
}

mod any_bytes {
    use super::*;
    use proptest::prelude::*;

    /// The committed snapshot's first 4 KiB: long enough to hold whole events.
    fn prefix() -> Vec<u8> {
        let bytes = std::fs::read(data("torch-cpu-step.pickle")).unwrap();
        bytes[..4096].to_vec()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever a file holds, reading it is a snapshot or an error, never a panic, and a
        /// snapshot read replays or fails with an error.
        #[test]
        fn corrupt_snapshots_are_errors_not_panics(
            edits in proptest::collection::vec((0usize..4096, any::<u8>()), 0..16),
            cut in 0usize..4096,
        ) {
            let mut bytes = prefix();
            for (at, byte) in edits {
                bytes[at] = byte;
            }
            bytes.truncate(cut.max(1));
            if let Ok(snapshot) = Snapshot::from_bytes(&bytes) {
                let _ = replay_snapshot(&snapshot, &SNAPSHOT_POLICIES, Some(1 << 20), true);
            }
        }

        /// Events of any sizes and addresses (a huge block, a free of what was never
        /// allocated, segments freed twice) replay or fail with an error.
        #[test]
        fn any_events_replay_or_fail_cleanly(
            events in proptest::collection::vec(
                (0usize..5, 0u64..8, prop_oneof![Just(i64::MAX as u64), Just(1u64 << 62), 0u64..(1 << 24)]),
                1..40,
            ),
        ) {
            const ACTIONS: [&str; 5] =
                ["alloc", "free_completed", "segment_alloc", "segment_free", "oom"];
            let events = events
                .into_iter()
                .map(|(action, addr, size)| event(ACTIONS[action], addr << 20, size))
                .collect();
            let bytes = pickled(&RawSnapshot {
                segments: Vec::new(),
                device_traces: vec![events],
            });
            let snapshot = Snapshot::from_bytes(&bytes).unwrap();
            let _ = replay_snapshot(&snapshot, &SNAPSHOT_POLICIES, None, true);
        }
    }
}
