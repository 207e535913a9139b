//! Benchmarks of Headroom against its peers: the same traces through headroom-alloc,
//! offset-allocator and a first-fit list, in one process; and the models the training benches
//! time.

pub mod harness;
pub mod models;
pub mod peers;
