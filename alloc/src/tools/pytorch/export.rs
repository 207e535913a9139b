//! Headroom's traces and PyTorch's snapshots replayed with the allocator's history on, and the
//! histories written as PyTorch memory snapshots (`viz_writer`), for PyTorch's viewers: a
//! Headroom run as they draw a PyTorch one, or a PyTorch program's blocks where headroom-alloc
//! puts them.

use std::io;
use std::path::Path;

use super::snapshot::Snapshot;
use super::stream::AllocationStream;
use super::viz_writer::{ExportCounts, write_devices_memory_viz, write_memory_viz};
use crate::bookkeeping::error::{Error, Result};
use crate::bookkeeping::history::History;
use crate::policy::config::{AllocatorConfig, EXPANSION_STEP, Growth};
use crate::tools::trace::{
    NumberedOp, TraceSettings, read_trace_file_with_settings, replay_with_growth_step,
};

/// Replays the trace file at `trace` under the settings it was recorded with (a trace without
/// them, under the default allocator limited to `default_limit`) and writes its history to
/// `path` as a PyTorch memory snapshot.
pub fn write_trace_file_memory_viz(
    trace: &Path,
    default_limit: u64,
    path: &Path,
) -> Result<ExportCounts> {
    let (recorded, ops) = read_trace_file_with_settings(trace)?;
    let settings = recorded.unwrap_or_else(|| {
        TraceSettings::of(&AllocatorConfig::default(), default_limit, EXPANSION_STEP)
    });
    write_trace_memory_viz(&ops, &settings, path).map_err(|err| err.in_trace_file(trace))
}

/// Replays `ops` under `settings` with the allocator's history recorded, and writes that
/// history to `path` as a PyTorch memory snapshot: a Headroom trace, with the addresses and
/// regions its replay gives it, as PyTorch's viewers draw it.
pub fn write_trace_memory_viz<O: NumberedOp>(
    ops: &[O],
    settings: &TraceSettings,
    path: &Path,
) -> Result<ExportCounts> {
    let config = settings.allocator_config();
    let history = replayed_history(ops, config, settings.limit, settings.growth_step)?;
    write_history_memory_viz(&history, settings.limit, path)
}

/// Writes `history`, recorded by an allocator limited to `limit` bytes, to `path` as a PyTorch
/// memory snapshot of one device.
pub fn write_history_memory_viz(
    history: &History,
    limit: u64,
    path: &Path,
) -> Result<ExportCounts> {
    write_file(path, |file| write_memory_viz(history, limit, file))
}

/// The history of `ops` replayed under `config` (its history turned on) over `capacity` bytes
/// grown in steps of `growth_step`.
fn replayed_history<O: NumberedOp>(
    ops: &[O],
    config: AllocatorConfig,
    capacity: u64,
    growth_step: u64,
) -> Result<History> {
    let config = config.with_history(usize::MAX);
    replay_with_growth_step(ops, config, capacity, growth_step)?
        .history
        .ok_or_else(|| Error::Corrupted("a replay with its history on kept none".into()))
}

/// Replays every device of a PyTorch `snapshot` under `growth` (limited to `limit`, else with
/// room for every block at once) with the allocator's history on, and writes the histories to
/// `path` as a snapshot of the same devices: where headroom-alloc would have put the program's
/// blocks, for PyTorch's own viewers to draw beside the original.
pub fn write_snapshot_replay_memory_viz(
    snapshot: &Snapshot,
    growth: Growth,
    limit: Option<u64>,
    path: &Path,
) -> Result<ExportCounts> {
    let mut histories = Vec::new();
    for trace in &snapshot.devices {
        let stream = AllocationStream::of(trace);
        let capacity = limit.unwrap_or_else(|| stream.room_for_all());
        let config = AllocatorConfig::default()
            .with_growth(growth)
            .with_limit_bytes(capacity);
        let history = replayed_history(&stream.ops, config, capacity, EXPANSION_STEP)?;
        histories.push((trace.device, history, capacity));
    }
    let mut devices: Vec<Option<(&History, u64)>> = Vec::new();
    for (device, history, capacity) in &histories {
        if devices.len() <= *device {
            devices.resize(device + 1, None);
        }
        devices[*device] = Some((history, *capacity));
    }
    write_file(path, |file| write_devices_memory_viz(&devices, file))
}

/// Writes the file at `path` with `write`, errors naming it.
fn write_file(
    path: &Path,
    write: impl FnOnce(std::fs::File) -> io::Result<ExportCounts>,
) -> Result<ExportCounts> {
    let io = |source| Error::Io {
        path: path.display().to_string(),
        source,
    };
    write(std::fs::File::create(path).map_err(io)?).map_err(io)
}
