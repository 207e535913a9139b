#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

mod address_map;
mod allocator;
mod bins;
mod chunk;
#[cfg(feature = "cli")]
pub mod cli;
mod config;
mod error;
mod free_set;
mod growth;
mod history;
mod inspect;
pub mod model;
mod parse_size;
mod report;
mod shared;
mod size;
mod snapshot;
mod source;
mod stats;
mod tag;
mod tag_naming;
pub mod trace;
mod validate;

pub use allocator::{Allocation, Allocator};
pub use bins::{BIN_COUNT, bin_index, bin_min_size};
pub use config::{
    AllocatorConfig, DEFAULT_MAX_INTERNAL_FRAGMENTATION, EXPANSION_STEP, FIRST_REGION, Growth,
    Limit,
};
pub use error::{Error, InvalidFreeReason, Result};
pub use history::{Event, EventKind, History};
pub use parse_size::parse_size;
pub use report::{OomCause, OomReport, RegionOccupancy, Verdict};
pub use shared::{Block, SharedAllocator};
pub use size::{GRANULE, format_bytes, round_size};
pub use snapshot::{BinRow, ChunkSnapshot, MemorySnapshot, RegionSnapshot};
pub use source::{FaultInjecting, HostMemory, MemorySource, SourceError, VirtualMemory};
pub use stats::{Stats, TagUsage, fragmentation};
pub use tag::Tag;
