//! Meta kernels: nothing to compute (and no data to check ids against); planning for CUDA, the
//! scratch buffers the CUDA kernels take.

use super::grouping::GradScratch;
use crate::backend::index::{CausalMaskSpec, EmbeddingSpec, IndexKernels};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;

impl IndexKernels for MetaBackend {
    fn embedding(&self, _: EmbeddingSpec, _: &Buffer, _: &Buffer, _: &mut Buffer) -> Result<()> {
        Ok(())
    }

    fn embedding_backward(
        &self,
        spec: EmbeddingSpec,
        ids: &Buffer,
        dy: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        // On CUDA the positions grouped by id go up to the device, with room for the partial
        // rows of long runs: their sizes follow from the geometry alone.
        if self.plans_cuda() && !out.is_empty() {
            let op = "embedding_backward";
            GradScratch::alloc(
                ids.memory(),
                spec.vocab,
                spec.dim,
                ids.len(),
                dy.dtype(),
                op,
            )?;
        }
        Ok(())
    }

    fn causal_mask(&self, _: CausalMaskSpec, _: f64, _: &Buffer, _: &mut Buffer) -> Result<()> {
        Ok(())
    }
}
