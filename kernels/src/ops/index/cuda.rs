//! CUDA kernels: embedding, cross-entropy and the causal mask (`index.cu`). Ids and targets are
//! read back to the host first, to check their range exactly as the CPU backend does (and, for
//! the embedding's gradient, to group positions by id): these ops wait for the stream.

use cudarc::driver::LaunchConfig;

use super::grouping::{GradScratch, IdGroups};
use crate::backend::index::{
    CausalMaskSpec, CrossEntropySpec, EmbeddingSpec, IndexKernels, check_range, counted_rows,
};
use crate::buffer::Buffer;
use crate::cuda::{Arg, BLOCK, CudaBackend, Family, float_kernel};
use crate::dtype::DType;
use crate::error::Result;

/// The longest row of logits a warp reads (`index.cu`); longer rows take a whole block each.
const WARP_ROW: usize = 1024;

impl CudaBackend {
    /// Copies `values` to the start of the u32 buffer `to`, which holds at least as many.
    fn upload_u32(&self, op: &'static str, values: &[u32], to: &Buffer) -> Result<()> {
        debug_assert!(values.len() <= to.len(), "{op}: scratch too small");
        self.copy_to_device(op, bytemuck::cast_slice(values), to.addr())
    }

    /// Reads the targets, checks them, and returns how many rows count (not ignored).
    fn checked_targets(
        &self,
        spec: CrossEntropySpec,
        targets: &Buffer,
        op: &'static str,
    ) -> Result<usize> {
        let host = self.read_u32(op, targets)?;
        check_range(op, "target", &host, spec.classes, spec.ignore)?;
        Ok(counted_rows(&host, spec.ignore))
    }
}

impl IndexKernels for CudaBackend {
    fn embedding(
        &self,
        spec: EmbeddingSpec,
        table: &Buffer,
        ids: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "embedding";
        let host = self.read_u32(OP, ids)?;
        check_range(OP, "id", &host, spec.vocab, None)?;
        let name = float_kernel("embedding", table.dtype(), OP)?;
        if out.is_empty() {
            return Ok(());
        }
        let args = [
            table.into(),
            ids.into(),
            out.into(),
            ids.len().into(),
            spec.dim.into(),
        ];
        self.launch(OP, Family::Index, &name, self.grid(out.len() as u64), &args)
    }

    fn embedding_backward(
        &self,
        spec: EmbeddingSpec,
        ids: &Buffer,
        dy: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "embedding_backward";
        let host = self.read_u32(OP, ids)?;
        check_range(OP, "id", &host, spec.vocab, None)?;
        let name = float_kernel("embedding_backward", dy.dtype(), OP)?;
        if out.is_empty() {
            return Ok(());
        }
        let groups = IdGroups::new(&host, spec.vocab, OP)?;
        let scratch = GradScratch::alloc(
            dy.memory(),
            spec.vocab,
            spec.dim,
            host.len(),
            dy.dtype(),
            OP,
        )?;
        self.upload_u32(OP, groups.rows(), &scratch.rows)?;
        self.upload_u32(OP, groups.positions(), &scratch.positions)?;
        // Without room for pieces no run is long enough to cut; the partials are never read.
        let mut partials = 0u64;
        if let Some((bounds, sums)) = &scratch.pieces {
            partials = sums.addr();
            let count = groups.piece_count();
            if count > 0 {
                self.upload_u32(OP, groups.pieces(), bounds)?;
                let args = [
                    (&scratch.positions).into(),
                    bounds.into(),
                    dy.into(),
                    sums.into(),
                    count.into(),
                    spec.dim.into(),
                ];
                let pieces = float_kernel("embedding_pieces", dy.dtype(), OP)?;
                let grid = self.grid((count * spec.dim) as u64);
                self.launch(OP, Family::Index, &pieces, grid, &args)?;
            }
        }
        let args = [
            (&scratch.rows).into(),
            (&scratch.positions).into(),
            partials.into(),
            dy.into(),
            out.into(),
            spec.vocab.into(),
            spec.dim.into(),
        ];
        self.launch(OP, Family::Index, &name, self.grid(out.len() as u64), &args)
    }

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
            let (group, grid) = self.row_grid(spec.rows, spec.classes, WARP_ROW);
            let name = float_kernel(&format!("cross_entropy_{group}"), logits.dtype(), OP)?;
            let args: [Arg; 7] = [
                logits.into(),
                targets.into(),
                ignore.into(),
                has_ignore.into(),
                (&losses).into(),
                spec.rows.into(),
                spec.classes.into(),
            ];
            self.launch(OP, Family::Index, &name, grid, &args)?;
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
        self.launch(OP, Family::Index, &name, one_block, &args)
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
        let (group, grid) = self.row_grid(spec.rows, spec.classes, WARP_ROW);
        let name = format!(
            "cross_entropy_backward_{group}_{}_{}",
            logits.dtype(),
            dloss.dtype()
        );
        let args: [Arg; 9] = [
            dloss.into(),
            (counted as f64).into(),
            logits.into(),
            targets.into(),
            spec.ignore.unwrap_or(0).into(),
            spec.ignore.is_some().into(),
            out.into(),
            spec.rows.into(),
            spec.classes.into(),
        ];
        self.launch(OP, Family::Index, &name, grid, &args)
    }

    fn causal_mask(
        &self,
        spec: CausalMaskSpec,
        fill: f64,
        x: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "causal_mask";
        let name = float_kernel(OP, x.dtype(), OP)?;
        if out.is_empty() || spec.size == 0 {
            return Ok(());
        }
        let args = [
            x.into(),
            out.into(),
            out.len().into(),
            spec.size.into(),
            fill.into(),
        ];
        self.launch(OP, Family::Index, &name, self.grid(out.len() as u64), &args)
    }
}
