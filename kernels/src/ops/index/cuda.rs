//! CUDA kernels: embedding and the causal mask (`index.cu`). Ids are read back to the host
//! first, to check their range exactly as the CPU backend does (and, for the embedding's
//! gradient, to group positions by id): these ops wait for the stream.

use std::ops::Range;

use super::grouping::{GradScratch, IdGroups};
use super::kernels::{CausalMaskSpec, EmbeddingSpec, IndexKernels, check_range, positions_of};
use crate::buffer::Buffer;
use crate::cuda::{CudaBackend, Family, float_kernel};
use crate::error::Result;

impl CudaBackend {
    /// Copies `values` to the start of the u32 buffer `to`, which holds at least as many.
    fn upload_u32(&self, op: &'static str, values: &[u32], to: &Buffer) -> Result<()> {
        debug_assert!(values.len() <= to.len(), "{op}: scratch too small");
        self.copy_to_device(op, bytemuck::cast_slice(values), to.addr())
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
        rows: Range<usize>,
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
        let count = rows.len();
        let groups = IdGroups::new(&host, rows, OP)?;
        let scratch = GradScratch::alloc(dy.memory(), count, spec.dim, host.len(), dy.dtype(), OP)?;
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
            count.into(),
            spec.dim.into(),
        ];
        self.launch(OP, Family::Index, &name, self.grid(out.len() as u64), &args)
    }

    fn document_positions(
        &self,
        shape: (usize, usize),
        starts: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        // Checked and computed on the host, as ids are: the starts come back, the positions go.
        const OP: &str = "document_positions";
        let positions = positions_of(&self.read_u32(OP, starts)?, shape, OP)?;
        if positions.is_empty() {
            return Ok(());
        }
        self.upload_u32(OP, &positions, out)
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
