//! A device's trace as the allocation stream a replay runs, and what the trace itself implies.
//!
//! The rule: a block is held from its `alloc` to its `free_completed` (until then PyTorch's
//! allocator keeps it, for the streams that used it); a block freed in the trace without being
//! allocated there was allocated before the trace began (its ring buffer had dropped the
//! event) and is held from the start. An `oom` is a failed request that held nothing. PyTorch's
//! own reserved bytes follow its segment events, where the trace has them. Byte counts
//! saturate: a corrupt trace's absurd sizes give absurd figures, not an overflow.

use std::collections::HashMap;

use super::category;
use super::snapshot::{Action, DeviceTrace, Event};
use crate::bookkeeping::size::round_size;
use crate::bookkeeping::tag::Tag;
use crate::policy::config::EXPANSION_STEP;
use crate::tools::trace::{MAX_SEARCHED_LIMIT, NumberedOp, TraceOp};

/// An operation of a snapshot's stream, known by its event's index in the device's trace (a
/// block held from before the trace, by the event that frees it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotOp {
    /// The event's index in the trace.
    pub event: usize,
    /// The operation.
    pub op: TraceOp,
}

impl NumberedOp for SnapshotOp {
    fn op(&self) -> TraceOp {
        self.op
    }
    fn number(&self, _index: usize) -> usize {
        self.event
    }
}

/// A device's trace as operations, with the figures the trace implies.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocationStream {
    /// The operations, the blocks held from before the trace first.
    pub ops: Vec<SnapshotOp>,
    /// Blocks allocated before the trace began (freed in it without an `alloc` there).
    pub held_before: usize,
    /// The most requested bytes held at once.
    pub peak_requested: u64,
    /// How many of `ops` had run when the most was held (the operation that reached it
    /// included).
    pub ops_to_peak: usize,
    /// The most bytes PyTorch's segments held at once, where the trace records its segments.
    pub torch_reserved_peak: Option<u64>,
    /// The index of the first `oom` event, if PyTorch ran out of memory.
    pub torch_oom: Option<usize>,
    /// Each stream's blocks and demand, in the order the streams first appear: PyTorch's
    /// allocator keeps each stream's blocks apart, so a trace of several streams says what
    /// each held.
    pub streams: Vec<StreamDemand>,
}

/// What one stream of a trace held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct StreamDemand {
    /// The stream, as PyTorch records it (0: the default stream).
    pub stream: u64,
    /// Blocks allocated on it in the trace, and held from before it.
    pub blocks: usize,
    /// The most requested bytes it held at once.
    pub peak_requested: u64,
}

/// The streams of a trace as it is read: what each holds now and has held.
#[derive(Default)]
struct StreamTally {
    streams: Vec<StreamDemand>,
    /// Bytes each stream holds now.
    held: HashMap<u64, u64>,
}

impl StreamTally {
    /// Counts a block of `size` bytes taken on `stream`.
    fn take(&mut self, stream: u64, size: u64) {
        let held = self.held.entry(stream).or_default();
        *held = held.saturating_add(size);
        let at = match self.streams.iter().position(|s| s.stream == stream) {
            Some(at) => at,
            None => {
                self.streams.push(StreamDemand {
                    stream,
                    blocks: 0,
                    peak_requested: 0,
                });
                self.streams.len() - 1
            }
        };
        let demand = &mut self.streams[at];
        demand.blocks += 1;
        demand.peak_requested = demand.peak_requested.max(*held);
    }

    /// Counts a block of `size` bytes given back on `stream`.
    fn give(&mut self, stream: u64, size: u64) {
        if let Some(held) = self.held.get_mut(&stream) {
            *held = held.saturating_sub(size);
        }
    }
}

impl AllocationStream {
    /// The stream of `trace`.
    pub fn of(trace: &DeviceTrace) -> Self {
        let held_before = held_before(&trace.events);
        let mut ops: Vec<SnapshotOp> = held_before
            .iter()
            .enumerate()
            .map(|(id, &(event, size))| SnapshotOp {
                event,
                op: TraceOp::Alloc {
                    id: id as u64,
                    size,
                    tag: tag(&trace.events[event]),
                },
            })
            .collect();
        // Live blocks by address: id, size and stream; bytes held per stream.
        let mut live: HashMap<u64, (u64, u64, u64)> = HashMap::new();
        let mut streams = StreamTally::default();
        for (id, &(event, _)) in held_before.iter().enumerate() {
            let e = &trace.events[event];
            live.entry(e.addr).or_insert((id as u64, e.size, e.stream));
            streams.take(e.stream, e.size);
        }
        let mut next_id = held_before.len() as u64;
        let mut held = held_before
            .iter()
            .fold(0u64, |held, &(_, size)| held.saturating_add(size));
        let mut peak_requested = held;
        let mut ops_to_peak = ops.len();
        let (mut reserved, mut reserved_peak, mut segments) = (0u64, 0u64, false);
        let mut torch_oom = None;
        for (at, event) in trace.events.iter().enumerate() {
            match event.action {
                Action::Alloc => {
                    let id = next_id;
                    next_id += 1;
                    live.insert(event.addr, (id, event.size, event.stream));
                    streams.take(event.stream, event.size);
                    let (size, tag) = (event.size, tag(event));
                    ops.push(SnapshotOp {
                        event: at,
                        op: TraceOp::Alloc { id, size, tag },
                    });
                    held = held.saturating_add(size);
                    if held > peak_requested {
                        peak_requested = held;
                        ops_to_peak = ops.len();
                    }
                }
                Action::FreeCompleted => {
                    if let Some((id, size, stream)) = live.remove(&event.addr) {
                        ops.push(SnapshotOp {
                            event: at,
                            op: TraceOp::Free { id },
                        });
                        held = held.saturating_sub(size);
                        streams.give(stream, size);
                    }
                }
                Action::Oom => {
                    torch_oom.get_or_insert(at);
                    ops.push(SnapshotOp {
                        event: at,
                        op: TraceOp::Oom {
                            size: event.size,
                            tag: tag(event),
                        },
                    });
                }
                Action::SegmentAlloc | Action::SegmentMap => {
                    segments = true;
                    reserved = reserved.saturating_add(event.size);
                    reserved_peak = reserved_peak.max(reserved);
                }
                Action::SegmentFree | Action::SegmentUnmap => {
                    segments = true;
                    reserved = reserved.saturating_sub(event.size);
                }
                Action::FreeRequested | Action::Snapshot => {}
            }
        }
        Self {
            ops,
            held_before: held_before.len(),
            peak_requested,
            ops_to_peak,
            torch_reserved_peak: segments.then_some(reserved_peak),
            torch_oom,
            streams: streams.streams,
        }
    }
}

impl AllocationStream {
    /// A capacity that holds every block of the stream at once, in whole growth steps: the
    /// limit of a replay that is not given one.
    pub fn room_for_all(&self) -> u64 {
        let total = self
            .ops
            .iter()
            .filter_map(|op| match op.op {
                TraceOp::Alloc { size, .. } => round_size(size),
                _ => None,
            })
            .fold(0u64, u64::saturating_add);
        total
            .div_ceil(EXPANSION_STEP)
            .saturating_add(1)
            .saturating_mul(EXPANSION_STEP)
            .min(MAX_SEARCHED_LIMIT)
    }
}

/// The blocks freed in `events` without an `alloc` before their free: each event's index and
/// the block's size, in the order of the trace.
fn held_before(events: &[Event]) -> Vec<(usize, u64)> {
    let mut live = std::collections::HashSet::new();
    let mut before = Vec::new();
    for (at, event) in events.iter().enumerate() {
        match event.action {
            Action::Alloc => {
                live.insert(event.addr);
            }
            Action::FreeCompleted if !live.remove(&event.addr) => before.push((at, event.size)),
            _ => {}
        }
    }
    before
}

/// The tag of an event's block: its profiler category where it names one (a built-in kind, or
/// a tag of Headroom's export), else the module its innermost frame names, else `other`.
fn tag(event: &Event) -> Tag {
    let category = event.category.as_deref().filter(|c| *c != "unknown");
    category
        .and_then(category::tag_of)
        .or_else(|| event.module.as_deref().and_then(|m| Tag::named(m).ok()))
        .unwrap_or(Tag::OTHER)
}
