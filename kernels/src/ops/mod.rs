//! The ops, one folder each: `mod.rs` holds the API, its checks and its allocations (the same for
//! every backend), `cpu.rs` the CPU kernels. Every op validates its operands (shape, dtype,
//! device) before it allocates, and allocates before it computes, so a failure leaves nothing
//! behind.

pub mod data;
pub mod elementwise;
pub mod gemm;
pub mod reduce;
