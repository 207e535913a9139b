//! PyTorch's memory snapshots: what `torch.cuda.memory._dump_snapshot`
//! writes after `torch.cuda.memory._record_memory_history()`, read and replayed under this
//! allocator, so that a PyTorch run's allocation stream says what headroom-alloc would have
//! reserved for it, and whether its out-of-memory was fragmentation or demand; and the other
//! way, an allocator's history written in that format for PyTorch's viewers.
//!
//! Modules, each after the ones it uses:
//! - `pickle`: Python's pickle, the plain values a snapshot is made of;
//! - `category`: the profiler's categories of tensors as tags, both ways;
//! - `snapshot`: the snapshot's devices and their traces of events, read from the pickle;
//! - `stream`: a device's trace as operations to replay, with what the trace itself implies
//!   (its peak of requested bytes, PyTorch's own reserved bytes where it records its segments);
//! - `report`: the replay of each device under the allocator's policies, as the tool prints it;
//! - `pickler`: Python's pickle, written;
//! - `viz_writer`: an allocator's history written as a snapshot, for PyTorch's viewers;
//! - `export`: a Headroom trace's replay, or a PyTorch snapshot's, written so.
//!
//! A Headroom trace becomes a snapshot through its replay: the replay's allocator records its
//! history, with the addresses and regions the trace itself does not hold.

mod category;
mod export;
mod pickle;
mod pickler;
mod report;
mod snapshot;
mod stream;
mod viz_writer;

pub use export::{
    write_history_memory_viz, write_snapshot_replay_memory_viz, write_trace_file_memory_viz,
    write_trace_memory_viz,
};
pub use report::{
    DeviceReport, PeakState, PolicyReplay, SNAPSHOT_POLICIES, SnapshotReport, replay_snapshot,
};
pub use snapshot::{Action, DeviceTrace, Event, Snapshot};
pub use stream::{AllocationStream, SnapshotOp, StreamDemand};
pub use viz_writer::{ExportCounts, write_devices_memory_viz, write_memory_viz};
