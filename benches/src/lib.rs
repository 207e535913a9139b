//! Benchmarks of Headroom against its peers: the same traces through headroom-alloc,
//! offset-allocator and a first-fit list, in one process; the models the training benches
//! time; and what the bench binaries share: the allocation traces, timing, and the token ids of
//! the embedding benches.

pub mod alloc_traces;
pub mod fit_limits;
pub mod harness;
pub mod models;
pub mod peers;
pub mod timing;
pub mod token_ids;
