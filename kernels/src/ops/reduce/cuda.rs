//! CUDA kernels: reductions over one axis (`reduce.cu`). A contiguous axis takes a block per
//! row, a strided one a block per 32 columns; a long axis with few such blocks is cut into
//! parts ([`ReduceSpec::parts`]) reduced by blocks of their own into a workspace, then
//! combined in order.

use cudarc::driver::LaunchConfig;

use super::kernels::{ReduceKernels, ReduceOp, ReduceSpec};
use crate::DType;
use crate::buffer::Buffer;
use crate::cuda::{Arg, BLOCK, CudaBackend, Family, enum_codes, float_kernel};
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
        let parts = spec.parts();
        if parts > 1 {
            return self.reduce_in_parts(op, spec, parts, x, out);
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
        let args = [
            code(op).into(),
            x.into(),
            out.into(),
            outer.into(),
            axis.into(),
            inner.into(),
        ];
        self.launch(
            op.name(),
            Family::Reduce,
            &name,
            self.column_grid(blocks),
            &args,
        )
    }
}

impl CudaBackend {
    /// Blocks of 32 x 8 threads, `blocks` of them (or as many as stay resident).
    fn column_grid(&self, blocks: u64) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (self.grid(blocks * u64::from(BLOCK)).grid_dim.0, 1, 1),
            block_dim: (32, 8, 1),
            shared_mem_bytes: 0,
        }
    }

    /// [`ReduceKernels::reduce`] with the axis cut into `parts` ([`ReduceSpec::parts`]):
    /// blocks over each part into a workspace of partial results, then each output over its
    /// parts, in order.
    fn reduce_in_parts(
        &self,
        op: ReduceOp,
        spec: ReduceSpec,
        parts: usize,
        x: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        let ReduceSpec { outer, axis, inner } = spec;
        let partial =
            x.memory()
                .alloc_workspace(DType::F64, 2 * outer * parts * inner, op.name())?;
        let (kind, grid) = if inner == 1 {
            let blocks = (outer * parts) as u64;
            ("rows", self.grid(blocks * u64::from(BLOCK)))
        } else {
            let blocks = (outer * parts * inner.div_ceil(32)) as u64;
            ("columns", self.column_grid(blocks))
        };
        let mut args: Vec<Arg> = vec![code(op).into(), x.into(), (&partial).into()];
        args.extend([outer.into(), axis.into()]);
        if inner > 1 {
            args.push(inner.into());
        }
        args.push(parts.into());
        let name = float_kernel(&format!("reduce_{kind}_partial"), x.dtype(), op.name())?;
        self.launch(op.name(), Family::Reduce, &name, grid, &args)?;
        args[1] = (&partial).into();
        args[2] = out.into();
        let name = float_kernel(&format!("reduce_{kind}_finish"), x.dtype(), op.name())?;
        let outputs = (outer * inner) as u64;
        let grid = if inner == 1 {
            self.grid(outputs * u64::from(BLOCK))
        } else {
            self.grid(outputs)
        };
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
