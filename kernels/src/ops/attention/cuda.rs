//! CUDA kernels: memory-efficient attention (`attention.cu`), one grid row per query head (per
//! key/value head for the keys' and values' gradients, which sum over the group's query heads
//! in order; a query head reads its key/value head in place). bf16 and
//! f16 heads of up to 128 features run on the matrix units (compute capability 8.0 and later):
//! a block holds 64 rows, a warp 16, and every block product is an `mma.sync` on tiles that
//! `cp.async` double-buffers in dynamic shared memory (heads of up to 64 in one instance, of
//! up to 128 in another, with smaller tiles in the backward pass so that its accumulators fit
//! the registers, and a forward pass that opts in to more than 48 KiB). Other dtypes run the
//! warp kernels: a warp per row, four rows to a block. Either kind walks only the tiles of the
//! other side that its rows see: causally none past the diagonal, and with a sliding window none
//! wholly before it. The backward pass first sums each row's output times
//! its gradient into a workspace (`delta`, one value per row in the compute type), then runs
//! the keys' and values' gradients and the queries' in two kernels, so that nothing
//! accumulates across blocks.

use cudarc::driver::LaunchConfig;

use super::kernels::{
    AttentionBackwardOperands, AttentionKernels, AttentionOperands, AttentionSpec,
};
use super::lse_dtype;
use crate::DType;
use crate::buffer::Buffer;
use crate::cuda::{Arg, CudaBackend, Family, float_kernel};
use crate::error::{Error, Result};

/// Features a head may have: what a warp's lanes hold (`ATT_HEAD_MAX`).
pub(crate) const HEAD_MAX: usize = 128;
/// Rows per block of the tensor-core kernels (`MMA_ROWS`).
const MMA_ROWS: usize = 64;
/// Padding of a shared tile's rows, in elements (`MMA_PAD`).
const MMA_PAD: usize = 8;
/// Warps per block of either kind (`ATT_WARPS`); a warp kernel's warp holds one row.
const WARPS: usize = 4;
/// Heads a grid holds: its y dimension.
const GRID_HEADS: usize = 65_535;

/// One instance of the tensor-core kernels (`ATTENTION_MMA` in attention.cu): heads of up to
/// `head` features, and the rows of the tiles of each of its kernels.
struct MmaShape {
    head: usize,
    forward_tile: usize,
    q_tile: usize,
    kv_tile: usize,
}

/// The instances, narrowest first.
const MMA_SHAPES: [MmaShape; 2] = [
    MmaShape {
        head: 64,
        forward_tile: 64,
        q_tile: 64,
        kv_tile: 64,
    },
    MmaShape {
        head: 128,
        forward_tile: 64,
        q_tile: 32,
        kv_tile: 16,
    },
];

/// One of an attention's kernels.
#[derive(Clone, Copy)]
enum Pass {
    Forward,
    BackwardQ,
    BackwardKv,
}

impl MmaShape {
    /// Bytes of dynamic shared memory `pass` takes, as attention.cu lays it out: two
    /// double-buffered tiles of 16-bit elements, and for the keys' and values' gradients two
    /// double-buffered tiles of f32 row statistics.
    fn shared_bytes(&self, pass: Pass) -> usize {
        let tile = match pass {
            Pass::Forward => self.forward_tile,
            Pass::BackwardQ => self.q_tile,
            Pass::BackwardKv => self.kv_tile,
        };
        let tiles = 2 * 2 * tile * (self.head + MMA_PAD) * 2;
        match pass {
            Pass::BackwardKv => tiles + 2 * 2 * tile * 4,
            _ => tiles,
        }
    }
}

/// Which kernels run an attention.
#[derive(Clone, Copy)]
enum Kernels {
    /// A warp per row.
    Warp,
    /// The matrix units, 64 rows a block.
    Mma(&'static MmaShape),
}

impl Kernels {
    /// The kernels for `spec` in `dtype` on `backend`: the narrowest tensor-core instance that
    /// holds the head, where the device has matrix units and gives a block the shared memory
    /// each of its kernels takes.
    fn pick(backend: &CudaBackend, spec: &AttentionSpec, dtype: DType) -> Self {
        let half = matches!(dtype, DType::BF16 | DType::F16);
        let fits = |shape: &MmaShape| {
            [Pass::Forward, Pass::BackwardQ, Pass::BackwardKv]
                .into_iter()
                .all(|pass| shape.shared_bytes(pass) <= backend.shared_opt_in as usize)
        };
        match MMA_SHAPES.iter().find(|shape| spec.head <= shape.head) {
            Some(shape) if backend.tensor_cores && half && fits(shape) => Self::Mma(shape),
            _ => Self::Warp,
        }
    }

    /// The name of kernel `base` of these in `dtype`.
    fn name(self, base: &str, dtype: DType, op: &'static str) -> Result<String> {
        match self {
            Self::Warp => float_kernel(base, dtype, op),
            Self::Mma(shape) => float_kernel(&format!("{base}_mma{}", shape.head), dtype, op),
        }
    }

    /// The launch of `pass` over `rows` rows of each of `heads` heads.
    fn grid(self, pass: Pass, rows: usize, heads: usize) -> LaunchConfig {
        let (per_block, shared) = match self {
            Self::Warp => (WARPS, 0),
            Self::Mma(shape) => (MMA_ROWS, shape.shared_bytes(pass)),
        };
        LaunchConfig {
            grid_dim: (rows.div_ceil(per_block).max(1) as u32, heads as u32, 1),
            block_dim: (32 * WARPS as u32, 1, 1),
            // At most 2 x 2 x 64 x 136 x 2 + 1 KiB: well within a u32.
            shared_mem_bytes: shared as u32,
        }
    }
}

/// Fails where the kernels cannot take `spec`: heads wider than a warp holds, more heads than a
/// grid does, or more positions than 32 bits count (the gradient of the keys counts them so).
fn check(spec: &AttentionSpec, op: &'static str) -> Result<()> {
    if u32::try_from(spec.len).is_err() {
        return Err(Error::Argument {
            op,
            detail: format!(
                "{} positions: the CUDA kernels take at most {}",
                spec.len,
                u32::MAX
            ),
        });
    }
    if spec.head > HEAD_MAX || spec.heads > GRID_HEADS {
        return Err(Error::Argument {
            op,
            detail: format!(
                "{} heads of {} features: the CUDA kernels take at most {GRID_HEADS} heads of \
                 {HEAD_MAX}",
                spec.heads, spec.head
            ),
        });
    }
    Ok(())
}

/// The window every kernel but `delta` takes after `causal`: with `causal`, query `i` sees keys
/// `j` with `i - window < j <= i`; `len` where there is none (every key up to the query).
fn window(spec: &AttentionSpec) -> usize {
    spec.window.map_or(spec.len, |w| w.min(spec.len))
}

/// The document arguments every kernel but `delta` takes after the window: the starts' address
/// (0 without documents) and the query heads per row of them. The starts are taken as they
/// are: a layout built on the host is checked there ([`crate::ops::documents::check_starts`]).
fn document_args(spec: &AttentionSpec, starts: Option<&Buffer>) -> [Arg; 2] {
    match (spec.documents, starts) {
        (Some(_), Some(starts)) => [starts.into(), spec.heads_per_row().into()],
        _ => [0u64.into(), 1usize.into()],
    }
}

/// The dropout arguments every kernel ends with: on or off, its probability and its seed.
fn dropout_args(spec: &AttentionSpec) -> [Arg; 3] {
    match spec.dropout {
        Some(drop) => [true.into(), drop.p.into(), drop.seed.into()],
        None => [false.into(), 0.0.into(), 0u64.into()],
    }
}

impl AttentionKernels for CudaBackend {
    fn attention(&self, spec: &AttentionSpec, operands: AttentionOperands<'_>) -> Result<()> {
        let AttentionOperands {
            q,
            k,
            v,
            starts,
            out,
            lse,
        } = operands;
        const OP: &str = "attention";
        check(spec, OP)?;
        if spec.elements() == 0 {
            return Ok(());
        }
        let kernels = Kernels::pick(self, spec, q.dtype());
        let name = kernels.name("attention", q.dtype(), OP)?;
        let mut args: Vec<Arg> = vec![
            q.into(),
            k.into(),
            v.into(),
            out.into(),
            lse.into(),
            spec.len.into(),
            spec.head.into(),
            spec.group.into(),
            spec.scale.into(),
            spec.causal.into(),
            window(spec).into(),
        ];
        args.extend(document_args(spec, starts));
        args.extend(dropout_args(spec));
        let config = kernels.grid(Pass::Forward, spec.len, spec.heads);
        self.launch(OP, Family::Attention, &name, config, &args)
    }

    fn attention_backward(
        &self,
        spec: &AttentionSpec,
        operands: AttentionBackwardOperands<'_>,
    ) -> Result<()> {
        let AttentionBackwardOperands {
            q,
            k,
            v,
            starts,
            out,
            lse,
            dout,
            dq,
            dk,
            dv,
        } = operands;
        const OP: &str = "attention_backward";
        check(spec, OP)?;
        if spec.elements() == 0 {
            return Ok(());
        }
        let dtype = q.dtype();
        let delta = q
            .memory()
            .alloc_workspace(lse_dtype(dtype), spec.rows(), OP)?;
        let name = float_kernel("attention_delta", dtype, OP)?;
        let args: [Arg; 5] = [
            out.into(),
            dout.into(),
            (&delta).into(),
            spec.rows().into(),
            spec.head.into(),
        ];
        let rows = Kernels::Warp.grid(Pass::Forward, spec.rows(), 1);
        self.launch(OP, Family::Attention, &name, rows, &args)?;
        let shared = |grads: &[&mut Buffer]| -> Vec<Arg> {
            let mut args: Vec<Arg> = vec![
                q.into(),
                k.into(),
                v.into(),
                dout.into(),
                lse.into(),
                (&delta).into(),
            ];
            args.extend(grads.iter().map(|g| Arg::from(g.addr())));
            args.extend([
                spec.len.into(),
                spec.head.into(),
                spec.group.into(),
                spec.scale.into(),
                spec.causal.into(),
                window(spec).into(),
            ]);
            args.extend(document_args(spec, starts));
            args.extend(dropout_args(spec));
            args
        };
        let kernels = Kernels::pick(self, spec, dtype);
        // The keys' and values' gradients: one grid row per key/value head, which walks its
        // group's query heads in order (no atomics: the same sums on every run).
        let config = kernels.grid(Pass::BackwardKv, spec.len, spec.kv_heads());
        let name = kernels.name("attention_backward_kv", dtype, OP)?;
        self.launch(OP, Family::Attention, &name, config, &shared(&[dk, dv]))?;
        let config = kernels.grid(Pass::BackwardQ, spec.len, spec.heads);
        let name = kernels.name("attention_backward_q", dtype, OP)?;
        self.launch(OP, Family::Attention, &name, config, &shared(&[dq]))
    }
}
