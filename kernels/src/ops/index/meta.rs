//! Meta kernels: nothing to compute (and no data to check indices against).

use super::{CausalMaskSpec, CrossEntropySpec, EmbeddingSpec, IndexKernels};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;

impl IndexKernels for MetaBackend {
    fn embedding(&self, _: EmbeddingSpec, _: &Buffer, _: &Buffer, _: &mut Buffer) -> Result<()> {
        Ok(())
    }

    fn embedding_backward(
        &self,
        _: EmbeddingSpec,
        _: &Buffer,
        _: &Buffer,
        _: &mut Buffer,
    ) -> Result<()> {
        Ok(())
    }

    fn cross_entropy(
        &self,
        _: CrossEntropySpec,
        _: &Buffer,
        _: &Buffer,
        _: &mut Buffer,
    ) -> Result<()> {
        Ok(())
    }

    fn cross_entropy_backward(
        &self,
        _: CrossEntropySpec,
        _: &Buffer,
        _: &Buffer,
        _: &Buffer,
        _: &mut Buffer,
    ) -> Result<()> {
        Ok(())
    }

    fn causal_mask(&self, _: CausalMaskSpec, _: f64, _: &Buffer, _: &mut Buffer) -> Result<()> {
        Ok(())
    }
}
