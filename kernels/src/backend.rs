//! What a backend must run: every op family's kernels, split by op category (as burn does). Ops
//! allocate their outputs in the op layer, the same way for every backend; a backend only
//! computes into them.
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
//! - A copy between a host buffer (the page-locked host tier) and the device is queued without
//!   waiting ([`DataKernels::read_queued`], [`DataKernels::write_queued`]), on a stream of its
//!   own on a GPU: the host buffer keeps the copy's mark and waits for it before the host
//!   reads, writes or frees the buffer; the device buffer a copy reads has the kernels wait for
//!   it before they overwrite it or reuse its memory.
//!
//! Each family's kernel trait and the types it takes (an op's geometry, its variants, its
//! hyper-parameters) live in that family's folder, `ops/<family>/kernels.rs`, below the op layer
//! that checks operands, allocates outputs and calls them; each backend implements them beside
//! the family's ops (`ops/<family>/{cpu,cuda,meta}.rs`).

use crate::ops::attention::kernels::AttentionKernels;
use crate::ops::data::kernels::DataKernels;
use crate::ops::elementwise::kernels::ElementwiseKernels;
use crate::ops::gemm::kernels::GemmKernels;
use crate::ops::index::kernels::IndexKernels;
use crate::ops::layout::kernels::LayoutKernels;
use crate::ops::loss::kernels::LossKernels;
use crate::ops::norm::kernels::NormKernels;
use crate::ops::optim::kernels::OptimKernels;
use crate::ops::quant::kernels::QuantKernels;
use crate::ops::random::kernels::RandomKernels;
use crate::ops::reduce::kernels::ReduceKernels;
use crate::ops::rotary::kernels::RotaryKernels;
use crate::ops::softmax::kernels::SoftmaxKernels;

/// Declares [`Backend`] over the family traits listed, and implements it for every type that
/// implements them all, so that the list is written once.
macro_rules! backend_of_families {
    ($($family:ident),+ $(,)?) => {
        /// A compute backend: every family's kernels.
        pub trait Backend: $($family +)+ Send + Sync {}

        impl<T> Backend for T where T: $($family +)+ Send + Sync {}
    };
}

backend_of_families!(
    AttentionKernels,
    DataKernels,
    ElementwiseKernels,
    ReduceKernels,
    GemmKernels,
    SoftmaxKernels,
    NormKernels,
    IndexKernels,
    LossKernels,
    LayoutKernels,
    RandomKernels,
    OptimKernels,
    RotaryKernels,
    QuantKernels,
);
