//! A snapshot's devices replayed under headroom-alloc's policies, beside what PyTorch's caching
//! allocator reserved for the same stream.

use serde::Serialize;

use super::snapshot::Snapshot;
use super::stream::{AllocationStream, StreamDemand};
use crate::bookkeeping::error::Result;
use crate::bookkeeping::report::Verdict;
use crate::bookkeeping::size::format_bytes;
use crate::policy::config::{AllocatorConfig, EXPANSION_STEP, Growth};
use crate::tools::trace::{
    LimitSearch, find_limit_with_growth_step, growth_name, replay_with_growth_step,
};

/// The policies a snapshot is replayed under unless told others: the allocator's default, and
/// one region that grows and shrinks in place (PyTorch's `expandable_segments:True`).
pub const SNAPSHOT_POLICIES: [Growth; 2] = [Growth::OnDemand, Growth::Expandable];

/// Every device of a snapshot, replayed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SnapshotReport {
    /// The limit the replays ran under; none: room for every block at once.
    pub limit: Option<u64>,
    /// Each device whose trace holds events.
    pub devices: Vec<DeviceReport>,
}

/// One device's trace, what it implies and its replays.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceReport {
    /// The device's index among the snapshot's traces.
    pub device: usize,
    /// Events in its trace.
    pub events: usize,
    /// Blocks allocated in the trace.
    pub allocs: usize,
    /// Blocks allocated before the trace began (freed in it), held from its start.
    pub held_before: usize,
    /// The most requested bytes held at once (the program's demand).
    pub peak_requested: u64,
    /// The most bytes PyTorch's segments held at once, where the trace records them.
    pub torch_reserved_peak: Option<u64>,
    /// Bytes of PyTorch's segments when the snapshot was taken, where the trace records its
    /// segments (a profiler's snapshot spans its tensors with one made-up segment).
    pub torch_reserved_at_end: Option<u64>,
    /// The event at which PyTorch ran out of memory, if it did.
    pub torch_oom_event: Option<usize>,
    /// Each stream's blocks and demand, kept apart as PyTorch's allocator keeps them (the
    /// replays below hold every stream's blocks in one pool).
    pub streams: Vec<StreamDemand>,
    /// The replays, one per policy.
    pub replays: Vec<PolicyReplay>,
}

/// The stream replayed under one policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyReplay {
    /// The growth policy.
    pub growth: &'static str,
    /// Peak bytes in use (each request rounded to the granule).
    pub peak_in_use: u64,
    /// Peak bytes reserved.
    pub peak_reserved: u64,
    /// Requests that ran out of memory under the limit (the ones the trace records as failed
    /// included, where they still fail).
    pub ooms: u64,
    /// The event of the first out-of-memory and its verdict: fragmentation (enough bytes free,
    /// none contiguous) or capacity.
    pub first_oom: Option<(usize, Verdict)>,
    /// The smallest limit the stream fits in, when asked for.
    pub smallest_limit: Option<LimitSearch>,
    /// The allocator when the program held the most (where PyTorch's own allocator was
    /// fullest, or its out-of-memory would come).
    pub at_peak: PeakState,
}

/// The allocator's state at one moment of a replay.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PeakState {
    /// The event of the trace after which it was taken.
    pub event: usize,
    /// Bytes reserved.
    pub reserved: u64,
    /// Bytes in use.
    pub in_use: u64,
    /// The largest free block of what is reserved: the biggest request that fits without
    /// growing.
    pub largest_free: u64,
    /// `(free - largest_free) / free` of the reserved bytes not in use: 0 when they are one
    /// block, towards 1 when they are many small ones.
    pub fragmentation: f64,
}

/// Replays every device of `snapshot` under each of `policies` (the snapshot's report names
/// [`SNAPSHOT_POLICIES`]), with `limit` (none: room for every block at once), and with
/// `find_limit` the smallest limit each fits in.
pub fn replay_snapshot(
    snapshot: &Snapshot,
    policies: &[Growth],
    limit: Option<u64>,
    find_limit: bool,
) -> Result<SnapshotReport> {
    let mut devices = Vec::new();
    for trace in &snapshot.devices {
        let stream = AllocationStream::of(trace);
        let capacity = limit.unwrap_or_else(|| stream.room_for_all());
        let mut replays = Vec::new();
        for &growth in policies {
            let config = AllocatorConfig::default()
                .with_growth(growth)
                .with_limit_bytes(capacity);
            let replay =
                replay_with_growth_step(&stream.ops, config.clone(), capacity, EXPANSION_STEP)?;
            let smallest_limit = match find_limit {
                true => Some(find_limit_with_growth_step(
                    &stream.ops,
                    AllocatorConfig::default().with_growth(growth),
                    EXPANSION_STEP,
                )?),
                false => None,
            };
            let to_peak = &stream.ops[..stream.ops_to_peak];
            let at_peak = replay_with_growth_step(to_peak, config, capacity, EXPANSION_STEP)?
                .final_stats
                .map(|stats| PeakState {
                    event: to_peak.last().map_or(0, |op| op.event),
                    reserved: stats.reserved,
                    in_use: stats.in_use,
                    largest_free: stats.largest_free,
                    fragmentation: stats.fragmentation,
                })
                .ok_or_else(|| crate::Error::Corrupted("a replay without statistics".into()))?;
            replays.push(PolicyReplay {
                at_peak,
                growth: growth_name(growth),
                peak_in_use: replay.peak_in_use,
                peak_reserved: replay.peak_reserved,
                ooms: replay.ooms,
                first_oom: replay.first_oom_op.zip(replay.first_oom_verdict),
                smallest_limit,
            });
        }
        devices.push(DeviceReport {
            device: trace.device,
            events: trace.events.len(),
            allocs: trace
                .events
                .iter()
                .filter(|e| e.action == super::snapshot::Action::Alloc)
                .count(),
            held_before: stream.held_before,
            peak_requested: stream.peak_requested,
            torch_reserved_peak: stream.torch_reserved_peak,
            torch_reserved_at_end: stream.torch_reserved_peak.map(|_| trace.segments_at_end),
            torch_oom_event: stream.torch_oom,
            streams: stream.streams,
            replays,
        });
    }
    Ok(SnapshotReport { limit, devices })
}

impl std::fmt::Display for SnapshotReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for device in &self.devices {
            write!(f, "{device}")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for DeviceReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "device {}: {} events, {} blocks allocated ({} more from before the trace)",
            self.device, self.events, self.allocs, self.held_before
        )?;
        writeln!(
            f,
            "  peak requested             {:>12}  (the program's demand)",
            format_bytes(self.peak_requested)
        )?;
        match self.torch_reserved_peak {
            Some(peak) => writeln!(
                f,
                "  PyTorch reserved (peak)    {:>12}  ({} at the snapshot)",
                format_bytes(peak),
                format_bytes(self.torch_reserved_at_end.unwrap_or(0))
            )?,
            None => writeln!(
                f,
                "  PyTorch reserved (peak)    {:>12}  (the trace records no segments: a profiler's \
                 snapshot, or one recorded without them)",
                "-"
            )?,
        }
        if self.streams.len() > 1 {
            for demand in &self.streams {
                writeln!(
                    f,
                    "    stream {:<#14x} {:>12}  at its peak, {} blocks",
                    demand.stream,
                    format_bytes(demand.peak_requested),
                    demand.blocks
                )?;
            }
        }
        if let Some(event) = self.torch_oom_event {
            writeln!(f, "  PyTorch ran out of memory at event {event}")?;
        }
        for replay in &self.replays {
            write!(
                f,
                "  headroom-alloc, {:<10} {:>12} reserved at the peak, {} in use",
                replay.growth,
                format_bytes(replay.peak_reserved),
                format_bytes(replay.peak_in_use),
            )?;
            match replay.first_oom {
                Some((event, verdict)) => writeln!(
                    f,
                    "; {} out-of-memory, the first at event {event} ({verdict})",
                    replay.ooms
                )?,
                None => writeln!(f)?,
            }
            let peak = &replay.at_peak;
            writeln!(
                f,
                "    at the program's peak (event {}): {} reserved, {} in use, largest free {}, \
                 fragmentation {:.1}%",
                peak.event,
                format_bytes(peak.reserved),
                format_bytes(peak.in_use),
                format_bytes(peak.largest_free),
                peak.fragmentation * 100.0
            )?;
            if let Some(search) = &replay.smallest_limit {
                writeln!(
                    f,
                    "    fits in {} at the least ({} packed: what no allocator can beat)",
                    format_bytes(search.limit),
                    format_bytes(search.packed_peak)
                )?;
            }
        }
        Ok(())
    }
}
