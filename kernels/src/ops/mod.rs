//! The ops, one folder each: `mod.rs` holds the API, its checks and its allocations (the same for
//! every backend) and the kernel trait of the family, `cpu.rs` the CPU kernels, `meta.rs` the
//! meta backend's (empty) ones. Every op validates its operands (shape, dtype,
//! device) before it allocates, and allocates before it computes, so a failure leaves nothing
//! behind.

pub mod data;
pub mod elementwise;
pub mod gemm;
pub mod index;
pub mod layout;
pub mod norm;
pub mod optim;
pub mod random;
pub mod reduce;
