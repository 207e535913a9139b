//! Benchmarks of Headroom against its peers: the same traces through headroom-alloc,
//! offset-allocator and a first-fit list, in one process; the models the training benches
//! time; and what the bench binaries share: the allocation traces, timing, the token ids of
//! the embedding benches, and the searches of what fits under a limit.

pub mod alloc_traces;
pub mod fit_limits;
pub mod harness;
pub mod longest_context;
pub mod models;
pub mod peers;
pub mod timing;
pub mod token_ids;
