//! CUDA kernels: reductions over one axis (`reduce.cu`).

use cudarc::driver::LaunchConfig;

use crate::backend::reduce::{ReduceKernels, ReduceOp, ReduceSpec};
use crate::buffer::Buffer;
use crate::cuda::{BLOCK, CudaBackend, Family, enum_codes, float_kernel};
use crate::error::Result;

// The ops' codes, numbered by `reduce.cu`'s enum alone: read from its source when the crate
// compiles.
enum_codes!(Family::Reduce, "Reduce": R_SUM, R_MEAN, R_MAX, R_SUM_SQUARES);

/// The op's code in `enum Reduce` of `reduce.cu`.
fn code(op: ReduceOp) -> i32 {
    match op {
        ReduceOp::Sum => R_SUM,
        ReduceOp::Mean => R_MEAN,
        ReduceOp::Max => R_MAX,
        ReduceOp::SumSquares => R_SUM_SQUARES,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::enum_codes::enum_len;

    #[test]
    fn every_op_has_its_own_code_and_every_code_an_op() {
        let ops = [
            ReduceOp::Sum,
            ReduceOp::Mean,
            ReduceOp::Max,
            ReduceOp::SumSquares,
        ];
        let mut codes = ops.map(code).to_vec();
        codes.sort_unstable();
        let len = enum_len(Family::Reduce.body(), "Reduce");
        assert_eq!(codes, (0..len as i32).collect::<Vec<_>>());
    }
}
