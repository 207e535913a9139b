//! The ops, one folder per family holding all of it: `mod.rs` the API, its checks and its
//! allocations (the same for every backend), `kernels.rs` the kernel trait a backend implements
//! and the types it takes (re-exported by `mod.rs`), `cpu.rs` the CPU kernels, `cuda.rs` the
//! CUDA ones (launching the kernels of the family's `.cu` file, `norm/norm.cu`), `meta.rs` the
//! meta backend's (empty, or taking the scratch memory of the backend planned for). `rows` holds
//! what the row families (softmax, norm) share. Every op validates its operands (shape, dtype,
//! device) before it allocates, and allocates before it computes, so a failure leaves nothing
//! behind.

pub mod attention;
pub mod data;
pub mod documents;
pub mod elementwise;
pub mod gemm;
pub mod index;
pub mod layout;
pub mod loss;
pub mod norm;
pub mod optim;
pub mod quant;
pub mod random;
pub mod reduce;
pub mod rotary;
pub mod rows;
pub mod softmax;
