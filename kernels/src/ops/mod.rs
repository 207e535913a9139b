//! The ops, one folder per family: `mod.rs` holds the API, its checks and its allocations (the
//! same for every backend), `cpu.rs` the CPU kernels, `cuda.rs` the CUDA ones (launching the
//! family's `.cu` kernels), `meta.rs` the meta backend's (empty, or taking the scratch memory of
//! the backend planned for). The kernel trait of a family and the types it takes live below,
//! in the crate's `backend` module, and are re-exported here. Every op validates its operands
//! (shape, dtype, device) before it allocates, and allocates before it computes, so a failure
//! leaves nothing behind.

pub mod attention;
pub mod data;
pub mod elementwise;
pub mod gemm;
pub mod index;
pub mod layout;
pub mod loss;
pub mod norm;
pub mod optim;
pub mod random;
pub mod reduce;
mod rows;
pub mod softmax;
