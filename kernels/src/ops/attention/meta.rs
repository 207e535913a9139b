//! Meta kernels: nothing to compute; planning for CUDA, the backward pass's row sums (`delta`)
//! that the CUDA kernels keep in a workspace (the CPU's blocks live on the host, and both
//! backends' tiles in registers or shared memory).

use super::lse_dtype;
use crate::backend::attention::{AttentionKernels, AttentionSpec};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;

impl AttentionKernels for MetaBackend {
    fn attention(
        &self,
        _: &AttentionSpec,
        _: &Buffer,
        _: &Buffer,
        _: &Buffer,
        _: &mut Buffer,
        _: &mut Buffer,
    ) -> Result<()> {
        Ok(())
    }

    fn attention_backward(
        &self,
        spec: &AttentionSpec,
        (q, _, _): (&Buffer, &Buffer, &Buffer),
        _: (&Buffer, &Buffer, &Buffer),
        _: &mut Buffer,
        _: &mut Buffer,
        _: &mut Buffer,
    ) -> Result<()> {
        if self.plans_cuda() && spec.elements() > 0 {
            let dtype = lse_dtype(q.dtype());
            q.memory()
                .alloc_workspace(dtype, spec.rows(), "attention_backward")?;
        }
        Ok(())
    }
}
