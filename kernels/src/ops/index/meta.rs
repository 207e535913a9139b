//! Meta kernels: nothing to compute (and no data to check ids against); planning for CUDA, the
//! scratch buffers the CUDA kernels take.

use std::ops::Range;

use super::grouping::GradScratch;
use super::kernels::{CausalMaskSpec, EmbeddingSpec, IndexKernels};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::work::Kernel;

impl IndexKernels for MetaBackend {
    fn embedding(
        &self,
        _: EmbeddingSpec,
        ids: &Buffer,
        _: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        // The rows read are as many as the rows written.
        self.record(Kernel::moving(&[ids, out, out]));
        Ok(())
    }

    fn embedding_backward(
        &self,
        spec: EmbeddingSpec,
        rows: Range<usize>,
        ids: &Buffer,
        dy: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        self.record(Kernel::moving(&[ids, dy, out]));
        // On CUDA the positions grouped by id go up to the device, with room for the partial
        // rows of long runs: their sizes follow from the geometry alone.
        if self.plans_cuda() && !out.is_empty() {
            let op = "embedding_backward";
            GradScratch::alloc(
                ids.memory(),
                rows.len(),
                spec.dim,
                ids.len(),
                dy.dtype(),
                op,
            )?;
        }
        Ok(())
    }

    fn document_positions(
        &self,
        _: (usize, usize),
        starts: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        self.record(Kernel::moving(&[starts, out]));
        Ok(())
    }

    fn causal_mask(&self, _: CausalMaskSpec, _: f64, x: &Buffer, out: &mut Buffer) -> Result<()> {
        self.record(Kernel::moving(&[x, out]));
        Ok(())
    }
}
