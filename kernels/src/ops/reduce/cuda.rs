//! CUDA kernels: reductions over one axis (`reduce.cu`).

use cudarc::driver::LaunchConfig;

use crate::backend::reduce::{ReduceKernels, ReduceOp, ReduceSpec};
use crate::buffer::Buffer;
use crate::cuda::{BLOCK, CudaBackend, Family, float_kernel};
use crate::error::Result;

/// The op's code in `enum Reduce` of `reduce.cu`.
fn code(op: ReduceOp) -> i32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Mean => 1,
        ReduceOp::Max => 2,
        ReduceOp::SumSquares => 3,
    }
}

impl ReduceKernels for CudaBackend {
    fn reduce(&self, op: ReduceOp, spec: ReduceSpec, x: &Buffer, out: &mut Buffer) -> Result<()> {
        let ReduceSpec { outer, axis, inner } = spec;
        if out.is_empty() {
            return float_kernel("reduce", x.dtype(), op.name()).map(drop);
        }
        if inner == 1 {
            // A block per output, striding along the contiguous axis.
            let name = float_kernel("reduce_rows", x.dtype(), op.name())?;
            let grid = self.grid(outer as u64 * u64::from(BLOCK));
            let args = [
                code(op).into(),
                x.into(),
                out.into(),
                outer.into(),
                axis.into(),
            ];
            return self.launch(op.name(), Family::Reduce, &name, grid, &args);
        }
        // Blocks of 32 x 8 threads, each over 32 neighbouring columns of one outer index.
        let name = float_kernel("reduce_columns", x.dtype(), op.name())?;
        let blocks = (outer * inner.div_ceil(32)) as u64;
        let grid = LaunchConfig {
            grid_dim: (self.grid(blocks * u64::from(BLOCK)).grid_dim.0, 1, 1),
            block_dim: (32, 8, 1),
            shared_mem_bytes: 0,
        };
        let args = [
            code(op).into(),
            x.into(),
            out.into(),
            outer.into(),
            axis.into(),
            inner.into(),
        ];
        self.launch(op.name(), Family::Reduce, &name, grid, &args)
    }
}
