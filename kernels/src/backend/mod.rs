//! What a backend must run, split by op category (as burn does). Ops allocate their outputs in
//! the op layer, the same way for every backend; a backend only computes into them.
//!
//! # Asynchronous backends
//!
//! A kernel call may return before its work is done: a GPU backend queues it on the device's one
//! stream and returns. Everything else is built so that this is safe:
//!
//! - Work on one stream runs in the order it was queued, so a kernel always sees the results of
//!   the kernels queued before it.
//! - A buffer's bytes go back to the allocator when it drops, possibly while queued kernels still
//!   use them. The allocator may hand them to the next op at once: that op's kernels queue behind
//!   the ones still reading the old contents, so they cannot overwrite them early (the stream
//!   order that PyTorch's caching allocator relies on too).
//! - [`DataKernels::read`] returns only once the bytes are on the host, so it waits for the
//!   stream; [`DataKernels::synchronize`] waits without reading. An error of queued work may
//!   surface at either.

//!
//! One file per op family holds its kernel trait and the types the trait takes (an op's
//! geometry, its variants, its hyper-parameters), below the op layer (`ops`) that checks
//! operands, allocates outputs and calls them.

pub(crate) mod attention;
pub(crate) mod data;
pub(crate) mod elementwise;
pub(crate) mod gemm;
pub(crate) mod index;
pub(crate) mod layout;
pub(crate) mod loss;
pub(crate) mod norm;
pub(crate) mod optim;
pub(crate) mod random;
pub(crate) mod reduce;
pub(crate) mod rows;
pub(crate) mod softmax;

pub use attention::AttentionKernels;
pub use data::DataKernels;
pub use elementwise::ElementwiseKernels;
pub use gemm::GemmKernels;
pub use index::IndexKernels;
pub use layout::LayoutKernels;
pub use loss::LossKernels;
pub use norm::NormKernels;
pub use optim::OptimKernels;
pub use random::RandomKernels;
pub use reduce::ReduceKernels;
pub use softmax::SoftmaxKernels;

/// A compute backend: every category of kernel.
pub trait Backend:
    AttentionKernels
    + DataKernels
    + ElementwiseKernels
    + ReduceKernels
    + GemmKernels
    + SoftmaxKernels
    + NormKernels
    + IndexKernels
    + LossKernels
    + LayoutKernels
    + RandomKernels
    + OptimKernels
    + Send
    + Sync
{
}

impl<T> Backend for T where
    T: AttentionKernels
        + DataKernels
        + ElementwiseKernels
        + ReduceKernels
        + GemmKernels
        + SoftmaxKernels
        + NormKernels
        + IndexKernels
        + LossKernels
        + LayoutKernels
        + RandomKernels
        + OptimKernels
        + Send
        + Sync
{
}
