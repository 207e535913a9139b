//! Benchmarks of Headroom against its peers: the same traces through headroom-alloc,
//! offset-allocator and a first-fit list, in one process.

pub mod harness;
pub mod peers;
