#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

// The crate in four folders, each above the ones before it:
// - `bookkeeping`: the core, over `u64` addresses: values (sizes, tags, segment sizes, how memory
//   was reserved), the structures of a heap (chunks, free sets, bins, the address index), what is
//   recorded about it (statistics, snapshots, OOM reports, history), the error type and what
//   can fail to parse, and `heap`, the only code that changes chunks;
// - `policy`: the configuration, memory sources, the streams' reuse rule, and growth, which
//   changes the heap through its region operations;
// - `allocator`: the `Allocator`, which owns the state of all of the above, with its read-only
//   view (`inspect`), the invariant walker (`validate`), the trace it streams and the
//   thread-safe `SharedAllocator`;
// - `tools`: traces (replay, the smallest limit, generators), PyTorch's memory snapshots, the
//   shadow model (feature `testing`) and the command-line subcommands (feature `cli`).

mod bookkeeping;
pub use bookkeeping::bins::{BIN_COUNT, bin_index, bin_min_size};
pub use bookkeeping::byte_size::ByteSize;
pub use bookkeeping::error::{Error, InvalidFreeReason, Result};
pub use bookkeeping::heap::Allocation;
pub use bookkeeping::history::{Event, EventKind, History};
pub use bookkeeping::parse_size::parse_size;
pub use bookkeeping::report::{OomCause, OomReport, RegionOccupancy, Verdict};
pub use bookkeeping::reservation::Reservation;
pub use bookkeeping::segment::{
    LARGE_REQUEST, LARGE_SEGMENT, SMALL_REQUEST, SMALL_SEGMENT, segment_size,
};
pub use bookkeeping::size::{GRANULE, format_bytes, round_size};
pub use bookkeeping::snapshot::{BinRow, ChunkSnapshot, MemorySnapshot, RegionSnapshot};
pub use bookkeeping::stats::{Stats, TagUsage, fragmentation};
pub use bookkeeping::tag::Tag;

mod policy;
pub use policy::config::{
    AllocatorConfig, DEFAULT_MAX_INTERNAL_FRAGMENTATION, EXPANSION_STEP, Growth, Limit,
};
#[cfg(target_os = "linux")]
pub use policy::source::HostPages;
#[cfg(feature = "cuda")]
pub use policy::source::{CudaError, CudaMemory, CudaPageLocked, CudaStreamClock};
pub use policy::source::{FaultInjecting, HostMemory, MemorySource, SourceError, VirtualMemory};
pub use policy::stream::{StreamClock, StreamEvent, StreamId};

mod allocator;
pub use allocator::Allocator;
pub use allocator::shared::{Block, SharedAllocator};

mod tools;
#[cfg(feature = "cli")]
pub use tools::cli;
#[cfg(feature = "testing")]
pub use tools::model;
pub use tools::{pytorch, trace};
