//! The core, bookkeeping over `u64` addresses that never touches memory: values, the structures
//! a heap is built from, what is recorded and reported about it, the error type, and the heap.
//! Each group below sits above the ones before it.

// Values: sizes, tags, PyTorch's segment sizes, and how memory was reserved.
pub(crate) mod reservation;
pub(crate) mod segment;
pub(crate) mod size;
pub(crate) mod tag;

// Structures: the chunk arena, the free chunks of a bin, the bins, the address index.
pub(crate) mod address_map;
pub(crate) mod bins;
pub(crate) mod chunk;
pub(crate) mod free_set;

// Records: statistics, memory snapshots, OOM reports, the history of events.
pub(crate) mod history;
pub(crate) mod report;
pub(crate) mod snapshot;
pub(crate) mod stats;

// The crate's one error type.
pub(crate) mod error;

// What can fail to parse or name: sizes written as text, and tags found by name.
pub(crate) mod byte_size;
pub(crate) mod parse_size;
pub(crate) mod tag_naming;

// Regions cut into chunks, the free ones in bins: the only code that changes them.
pub(crate) mod heap;
