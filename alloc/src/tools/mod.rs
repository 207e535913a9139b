//! Tools over the allocator: traces (reading, replay, the smallest limit, generators), PyTorch's
//! memory snapshots, the shadow model of the model-based tests, and the command-line tool's
//! subcommands. Each is public at the crate's root.

// Allocation traces: reading one, replaying it, the smallest limit it fits in, generators.
pub mod trace;

// PyTorch's memory snapshots, replayed as traces, and histories written as snapshots.
pub mod pytorch;

// Model-based testing: random action sequences checked against a shadow model.
#[cfg(feature = "testing")]
pub mod model;

// The `headroom-alloc` subcommands, over traces and snapshots.
#[cfg(feature = "cli")]
pub mod cli;
