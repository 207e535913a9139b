//! `[memory]` and `[checkpoint]`: how much memory the run may use and how it is reserved (its
//! problems are those of the budget the planner makes of it), and when checkpoints are written.

use headroom_alloc::ByteSize;
use serde::{Deserialize, Serialize};

use super::LinkBandwidth;

/// Whether the memory policy chooses the techniques a configuration leaves unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// The planner chooses by predicted step time among what fits.
    #[default]
    Auto,
    /// Unset techniques are off: no recomputation, f32 state, updates after the backward pass.
    Manual,
}

/// Where the planner's rates come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RatesKind {
    /// The fixed rates of the kind of device (`PlanTarget::rates`).
    #[default]
    Fixed,
    /// This machine's, from `headroom plan --calibrate`.
    Calibrated,
}

/// How much memory the run may use, and how it is reserved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// Which memory techniques the planner chooses: `auto` (the default) searches
    /// recomputation, the optimizer step in the backward pass and the optimizer state's
    /// precision for the fastest predicted step that fits, keeping those the configuration
    /// sets; `manual` leaves the unset ones off.
    pub policy: PolicyKind,
    /// The rates the planner predicts step times at: `fixed` (the same plans on every machine)
    /// or `calibrated` (this machine's, measured by `headroom plan --calibrate`).
    pub rates: RatesKind,
    /// The link between ranks that the planner prices their collectives at: a rate such as
    /// `300GB/s`, or `nvlink`, `pcie4`, `pcie5` or `infiniband`. Unset: the device kind's
    /// (PCIe between GPUs, shared memory between CPU processes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_bandwidth: Option<LinkBandwidth>,
    /// The simulated device's memory on the CPU, e.g. `8GiB` (a GPU's is what its driver
    /// reports). Sizes are text with a unit or a whole number of bytes, parsed as they are
    /// read and written back as they were given.
    pub capacity: ByteSize,
    /// The old name of `capacity`, still read (with a warning when read from a file), never
    /// written.
    #[serde(skip_serializing)]
    pub device: Option<ByteSize>,
    /// The most the run may use, e.g. `48MiB` (TensorFlow's `memory_limit`); without a limit
    /// or a fraction, the whole device (the simulated device's capacity on the CPU), except for
    /// the addition task on the CPU, whose own default is [`ADDITION_LIMIT`](super::ADDITION_LIMIT).
    pub limit: Option<ByteSize>,
    /// Or a fraction of the device's memory (PyTorch's memory fraction).
    pub fraction: Option<f64>,
    /// The most the host tier may hold, e.g. `64GiB`: the second pool, over host memory, that
    /// offloaded activations wait in (`model.offload_activations`). Unset: the machine's
    /// memory for a run, no limit for a plan.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_limit: Option<ByteSize>,
    /// Reserve the whole limit up front instead of growing on demand.
    pub preallocate: bool,
    /// One region that grows and shrinks in place a page at a time (PyTorch's
    /// `expandable_segments:True`), by name: growth on demand already does this wherever memory
    /// can be mapped (a GPU, host memory on Linux); elsewhere this grows by regions of the
    /// request rounded up to 2 MiB instead of PyTorch's segments.
    pub expandable_segments: bool,
    /// Allocator events kept for the run's Perfetto trace (`memory-trace.json`): the newest
    /// ones, and every out-of-memory.
    pub history: usize,
    /// Stream every allocation and free to `allocations-<n>.jsonl` in the run directory (one
    /// file per start of a process), for `headroom replay RUN_DIR`.
    pub trace: bool,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            capacity: ByteSize::gib(8),
            device: None,
            limit: None,
            fraction: None,
            host_limit: None,
            policy: PolicyKind::Auto,
            rates: RatesKind::Fixed,
            link_bandwidth: None,
            preallocate: false,
            expandable_segments: false,
            history: 200_000,
            trace: true,
        }
    }
}

/// When checkpoints are written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Every this many steps (0: only at the end).
    pub every: u64,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self { every: 500 }
    }
}
