//! CUDA kernels: the cross-entropy (`loss.cu`). Targets are read back to the host first, to
//! check their range exactly as the CPU backend does: these ops wait for the stream.

use cudarc::driver::LaunchConfig;

use super::kernels::{CrossEntropySpec, LossKernels, counted_rows};
use crate::buffer::Buffer;
use crate::cuda::{Arg, BLOCK, CudaBackend, Family, float_kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::index::kernels::check_range;

/// The longest row of logits a warp reads (`loss.cu`); longer rows take a whole block each.
const WARP_ROW: usize = 1024;

impl CudaBackend {
    /// Reads the targets, checks them, and returns how many rows count (not ignored).
    fn checked_targets(
        &self,
        spec: CrossEntropySpec,
        targets: &Buffer,
        op: &'static str,
    ) -> Result<usize> {
        if let Some(counted) = spec.counted {
            return Ok(counted);
        }
        let host = self.read_u32(op, targets)?;
        check_range(op, "target", &host, spec.classes, spec.ignore)?;
        Ok(counted_rows(&host, spec.ignore))
    }
}

impl LossKernels for CudaBackend {
    fn cross_entropy(
        &self,
        spec: CrossEntropySpec,
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "cross_entropy";
        let counted = self.checked_targets(spec, targets, OP)?;
        float_kernel("cross_entropy", logits.dtype(), OP)?;
        let losses = logits
            .memory()
            .alloc_workspace(DType::F64, spec.rows.max(1), OP)?;
        let (ignore, has_ignore) = (spec.ignore.unwrap_or(0), spec.ignore.is_some());
        if spec.rows > 0 {
            let (group, grid) = self.row_grid(spec.rows, spec.width, WARP_ROW);
            let name = float_kernel(&format!("cross_entropy_{group}"), logits.dtype(), OP)?;
            let args: [Arg; 8] = [
                logits.into(),
                targets.into(),
                ignore.into(),
                has_ignore.into(),
                (&losses).into(),
                spec.rows.into(),
                spec.classes.into(),
                spec.width.into(),
            ];
            self.launch(OP, Family::Loss, &name, grid, &args)?;
        }
        let name = float_kernel("mean_loss", out.dtype(), OP)?;
        let one_block = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let args = [
            (&losses).into(),
            spec.rows.into(),
            (counted as f64).into(),
            out.into(),
            out.len().into(),
        ];
        self.launch(OP, Family::Loss, &name, one_block, &args)
    }

    fn cross_entropy_backward(
        &self,
        spec: CrossEntropySpec,
        dloss: &Buffer,
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "cross_entropy_backward";
        let counted = self.checked_targets(spec, targets, OP)?.max(1);
        float_kernel(OP, dloss.dtype(), OP)?;
        float_kernel(OP, logits.dtype(), OP)?;
        if out.is_empty() {
            return Ok(());
        }
        let (group, grid) = self.row_grid(spec.rows, spec.width, WARP_ROW);
        let name = format!(
            "cross_entropy_backward_{group}_{}_{}",
            logits.dtype(),
            dloss.dtype()
        );
        let args: [Arg; 10] = [
            dloss.into(),
            (counted as f64).into(),
            logits.into(),
            targets.into(),
            spec.ignore.unwrap_or(0).into(),
            spec.ignore.is_some().into(),
            out.into(),
            spec.rows.into(),
            spec.classes.into(),
            spec.width.into(),
        ];
        self.launch(OP, Family::Loss, &name, grid, &args)
    }

    fn sliced_cross_entropy_parts(
        &self,
        spec: CrossEntropySpec,
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "sliced_cross_entropy_parts";
        float_kernel("sliced_cross_entropy_parts", logits.dtype(), OP)?;
        if spec.rows == 0 {
            return Ok(());
        }
        let (group, grid) = self.row_grid(spec.rows, spec.classes, WARP_ROW);
        let name = float_kernel(&format!("{OP}_{group}"), logits.dtype(), OP)?;
        let args: [Arg; 5] = [
            logits.into(),
            targets.into(),
            out.into(),
            spec.rows.into(),
            spec.classes.into(),
        ];
        self.launch(OP, Family::Loss, &name, grid, &args)
    }

    fn sliced_cross_entropy_backward(
        &self,
        spec: CrossEntropySpec,
        (lse, scale): (&Buffer, &Buffer),
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "sliced_cross_entropy_backward";
        float_kernel(OP, logits.dtype(), OP)?;
        if out.is_empty() {
            return Ok(());
        }
        let (group, grid) = self.row_grid(spec.rows, spec.classes, WARP_ROW);
        let name = float_kernel(&format!("{OP}_{group}"), logits.dtype(), OP)?;
        let args: [Arg; 7] = [
            lse.into(),
            scale.into(),
            logits.into(),
            targets.into(),
            out.into(),
            spec.rows.into(),
            spec.classes.into(),
        ];
        self.launch(OP, Family::Loss, &name, grid, &args)
    }
}
