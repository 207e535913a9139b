//! The allocator's policies: its configuration, where its regions come from, when a block freed
//! on one stream may serve another, and how it grows and shrinks the heap. Each group below sits
//! above the ones before it.

// How an allocator grows, how far, and what it keeps.
pub(crate) mod config;

// Memory sources (host, virtual, CUDA, fault-injecting), then the streams' reuse rule.
pub(crate) mod source;
pub(crate) mod stream;

// Reserving regions from the source as the growth policy says, through the heap's operations.
pub(crate) mod growth;
