//! A PyTorch memory snapshot as read from its pickle: per device, the trace of allocator events
//! PyTorch recorded (`device_traces`) and the segments it held when the snapshot was taken.

use std::io::Read;
use std::path::Path;

use super::pickle::{self, Value};
use crate::bookkeeping::error::{Error, Result};

/// A snapshot: one trace per device index, in PyTorch's order (a CPU profile's snapshot puts
/// the CPU after the GPUs).
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The devices whose trace holds events, in index order.
    pub devices: Vec<DeviceTrace>,
}

/// One device's trace.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceTrace {
    /// Its index among the snapshot's traces.
    pub device: usize,
    /// Its events, in the order they happened.
    pub events: Vec<Event>,
    /// Bytes of the segments PyTorch held on it when the snapshot was taken.
    pub segments_at_end: u64,
}

/// One event of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub action: Action,
    /// The block's (or segment's) address.
    pub addr: u64,
    /// Its size in bytes (for an `oom`, the bytes asked for).
    pub size: u64,
    /// The stream it was made on.
    pub stream: u64,
    /// The profiler's category of the tensor (`parameter`, `activation`, ...), when given.
    pub category: Option<String>,
    /// The module or layer its innermost frame that names one names: a profiler's
    /// `nn.Module: Block_0`, or the `forward` of one of torch.nn's modules' files, as a GPU's
    /// recorded stacks give it (`torch/nn/modules/linear.py` names `linear`).
    pub module: Option<String>,
}

/// The actions PyTorch's caching allocator records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A block handed out.
    Alloc,
    /// A block given back by its tensor; the allocator may hold it until its streams are done.
    FreeRequested,
    /// A block back in the allocator's pool.
    FreeCompleted,
    /// A segment reserved from the driver (`cudaMalloc`).
    SegmentAlloc,
    /// A segment given back to the driver.
    SegmentFree,
    /// Pages mapped into an expandable segment.
    SegmentMap,
    /// Pages unmapped from an expandable segment.
    SegmentUnmap,
    /// A request that failed with an out-of-memory.
    Oom,
    /// The moment a snapshot was taken.
    Snapshot,
}

impl Action {
    /// The action PyTorch names `name`.
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "alloc" => Self::Alloc,
            "free_requested" => Self::FreeRequested,
            "free_completed" => Self::FreeCompleted,
            "segment_alloc" => Self::SegmentAlloc,
            "segment_free" => Self::SegmentFree,
            "segment_map" => Self::SegmentMap,
            "segment_unmap" => Self::SegmentUnmap,
            "oom" => Self::Oom,
            "snapshot" => Self::Snapshot,
            _ => return None,
        })
    }
}

/// The prefix of the profiler's frame that names a module.
const MODULE_FRAME: &str = "nn.Module: ";

/// The folder of torch.nn's modules, one file per kind of layer, in a recorded stack's paths.
const MODULES_FOLDER: &str = "torch/nn/modules/";

/// The module or layer `frame` names, if it names one: the profiler's `nn.Module: Name`, or
/// the kind of layer whose file in torch.nn's modules holds the `forward` it is in.
fn layer(frame: &Value) -> Option<String> {
    let name = frame.get("name")?.as_str()?;
    if let Some(module) = name.strip_prefix(MODULE_FRAME) {
        return Some(module.to_owned());
    }
    if &*name != "forward" {
        return None;
    }
    let filename = frame.get("filename")?.as_str()?;
    let file = filename.replace('\\', "/");
    let (_, kind) = file.rsplit_once(MODULES_FOLDER)?;
    kind.strip_suffix(".py").map(str::to_owned)
}

impl Snapshot {
    /// Reads the snapshot pickled in `path`. A file that is not a complete pickle of a
    /// snapshot, an unknown action, or a snapshot whose traces hold no event (the history was
    /// not recorded) is an error that says what is missing.
    pub fn read(path: &Path) -> Result<Self> {
        let error = |detail: String| Error::Snapshot {
            path: path.display().to_string(),
            detail,
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|mut file| file.read_to_end(&mut bytes))
            .map_err(|source| Error::Io {
                path: path.display().to_string(),
                source,
            })?;
        Self::from_bytes(&bytes).map_err(error)
    }

    /// The snapshot pickled in `bytes`, or why it is not one.
    pub fn from_bytes(bytes: &[u8]) -> std::result::Result<Self, String> {
        if bytes.first() != Some(&0x80) {
            return Err("not a pickle (PyTorch's snapshots start with protocol byte 0x80)".into());
        }
        let value =
            pickle::read(bytes).map_err(|err| format!("not a PyTorch memory snapshot: {err}"))?;
        if !matches!(value, Value::Dict(_)) {
            return Err("not a PyTorch memory snapshot: its top level is not a dict".into());
        }
        let Some(traces) = value.get("device_traces").and_then(|t| t.items()) else {
            return Err(NO_TRACE.into());
        };
        let segments = value
            .get("segments")
            .and_then(|s| s.items())
            .unwrap_or_default();
        let mut devices = Vec::new();
        for (device, trace) in traces.iter().enumerate() {
            let events = trace.items().ok_or_else(|| {
                format!("not a PyTorch memory snapshot: device {device}'s trace is not a list")
            })?;
            if events.is_empty() {
                continue;
            }
            let events = events
                .iter()
                .enumerate()
                .map(|(at, raw)| event(raw, device, at))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let of_device = |s: &&Value| {
                let on = s.get("device").and_then(|d| d.as_u64());
                on.is_none_or(|d| d == device as u64)
            };
            let segments_at_end = segments
                .iter()
                .filter(of_device)
                .filter_map(|s| s.get("total_size").and_then(|t| t.as_u64()))
                .sum();
            devices.push(DeviceTrace {
                device,
                events,
                segments_at_end,
            });
        }
        if devices.is_empty() {
            return Err(NO_TRACE.into());
        }
        Ok(Self { devices })
    }
}

/// What a snapshot without events lacks, and how to record them.
const NO_TRACE: &str = "the snapshot holds no allocation events (device_traces is missing or \
    empty): record them with torch.cuda.memory._record_memory_history() before the run, then \
    torch.cuda.memory._dump_snapshot(path)";

/// Event `at` of device `device`'s trace, or why it cannot be read.
fn event(raw: &Value, device: usize, at: usize) -> std::result::Result<Event, String> {
    let here = || format!("event {at} of device {device}'s trace");
    let name = raw
        .get("action")
        .and_then(|a| a.as_str())
        .ok_or_else(|| format!("{}: no action", here()))?;
    let action = Action::parse(&name).ok_or_else(|| {
        format!(
            "{}: unknown action `{name}` (known: alloc, free_requested, free_completed, \
             segment_alloc, segment_free, segment_map, segment_unmap, oom, snapshot)",
            here()
        )
    })?;
    let number = |key: &str| raw.get(key).and_then(|v| v.as_u64()).unwrap_or(0);
    let frames = raw
        .get("frames")
        .and_then(|f| f.items())
        .unwrap_or_default();
    let module = frames.iter().find_map(layer);
    Ok(Event {
        action,
        addr: number("addr"),
        size: number("size"),
        stream: number("stream"),
        category: raw
            .get("category")
            .and_then(|c| c.as_str())
            .map(|c| c.to_string()),
        module,
    })
}
