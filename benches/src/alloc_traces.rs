//! The log-normal allocation traces that `alloc-compare` and the criterion alloc benches replay,
//! defined once so that both time the same trace.

use headroom_alloc::trace::{LogNormalTrace, TraceOp};

/// The capacity the log-normal family is replayed at.
pub const LOGNORMAL_CAPACITY: u64 = 64 << 20;

/// 20 000 allocations of log-normal sizes (median 16 KiB times `scale`, sigma 1.5) and
/// exponential lifetimes (mean 100 allocations), drawn from `seed`.
pub fn lognormal(scale: u64, seed: u64) -> Vec<TraceOp> {
    LogNormalTrace {
        median_size: 16_384.0,
        sigma: 1.5,
        seed,
        ..LogNormalTrace::default()
    }
    .with_scale(scale as f64)
    .generate()
}

/// The seed of the traces `alloc-compare` tables (`lognormal-x1`, `lognormal-x4`).
pub fn lognormal_seed() -> u64 {
    LogNormalTrace::default().seed
}
