#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

// Each module sits above the ones it uses:
// - values and structures: `size`, `tag`, `chunk`, `free_set`, `bins`, `address_map`, `stats`,
//   `reservation`, `snapshot`, `report`, `history`, `source`, `segment`; then `error`, and above it what can fail to parse
//   or name: `parse_size`, `byte_size` (a size parsed once and kept as written), `tag_naming`,
//   `config`;
// - `heap`: regions cut into chunks, with the free ones in bins; the only code that changes them;
// - `growth`: the memory source and growth policy, which change the heap through its region
//   operations; `inspect` and `validate`: a read-only view of an allocator, and what is read
//   from it;
// - `allocator`, which owns the state of all of the above; `shared`, `trace`, `model` and `cli`
//   on top.

mod address_map;
mod allocator;
mod bins;
mod byte_size;
mod chunk;
#[cfg(feature = "cli")]
pub mod cli;
mod config;
mod error;
mod free_set;
mod growth;
mod heap;
mod history;
mod inspect;
#[cfg(feature = "testing")]
pub mod model;
mod parse_size;
pub mod pytorch;
mod report;
mod reservation;
mod segment;
mod shared;
mod size;
mod snapshot;
mod source;
mod stats;
mod stream;
mod tag;
mod tag_naming;
pub mod trace;
mod validate;

pub use allocator::Allocator;
pub use bins::{BIN_COUNT, bin_index, bin_min_size};
pub use byte_size::ByteSize;
pub use config::{
    AllocatorConfig, DEFAULT_MAX_INTERNAL_FRAGMENTATION, EXPANSION_STEP, Growth, Limit,
};
pub use error::{Error, InvalidFreeReason, Result};
pub use heap::Allocation;
pub use history::{Event, EventKind, History};
pub use parse_size::parse_size;
pub use report::{OomCause, OomReport, RegionOccupancy, Verdict};
pub use reservation::Reservation;
pub use segment::{LARGE_REQUEST, LARGE_SEGMENT, SMALL_REQUEST, SMALL_SEGMENT, segment_size};
pub use shared::{Block, SharedAllocator};
pub use size::{GRANULE, format_bytes, round_size};
pub use snapshot::{BinRow, ChunkSnapshot, MemorySnapshot, RegionSnapshot};
#[cfg(target_os = "linux")]
pub use source::HostPages;
#[cfg(feature = "cuda")]
pub use source::{CudaError, CudaMemory, CudaPageLocked, CudaStreamClock};
pub use source::{FaultInjecting, HostMemory, MemorySource, SourceError, VirtualMemory};
pub use stats::{Stats, TagUsage, fragmentation};
pub use stream::{StreamClock, StreamEvent, StreamId};
pub use tag::Tag;
