//! Meta kernels: nothing to compute; the work of the scores the mask keeps (within the window,
//! if any) and, planning for CUDA, the backward pass's row sums (`delta`)
//! that the CUDA kernels keep in a workspace (the CPU's blocks live on the host, and both
//! backends' tiles in registers or shared memory).

use super::kernels::{
    AttentionBackwardOperands, AttentionKernels, AttentionOperands, AttentionSpec,
};
use super::lse_dtype;
use crate::dtype::DType;
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::work::Kernel;

impl MetaBackend {
    /// The dtype whose matrix rate prices the target's attention over `dtype`: a GPU's in the
    /// half type; the CPU's at f32's, since its half types compute in f32 or, where bf16 runs
    /// on AMX, in small blocks amid the softmax's work (at 0.9 of f32's rate on large
    /// products, against 0.2 of bf16's).
    fn computed_in(&self, dtype: DType) -> DType {
        if self.plans_cuda() { dtype } else { DType::F32 }
    }
}

impl AttentionKernels for MetaBackend {
    fn attention(&self, spec: &AttentionSpec, operands: AttentionOperands<'_>) -> Result<()> {
        let AttentionOperands {
            q, k, v, out, lse, ..
        } = operands;
        let shape = (spec.heads, spec.head);
        // Scores and their weighted sum: two products.
        let buffers = [q, k, v, &*out, &*lse];
        self.record(Kernel::attention(
            shape,
            spec.scores_per_head(),
            2.0,
            self.computed_in(q.dtype()),
            &buffers,
        ));
        Ok(())
    }

    fn attention_backward(
        &self,
        spec: &AttentionSpec,
        operands: AttentionBackwardOperands<'_>,
    ) -> Result<()> {
        let AttentionBackwardOperands {
            q,
            k,
            v,
            out,
            lse,
            dout,
            dq,
            dk,
            dv,
            ..
        } = operands;
        let shape = (spec.heads, spec.head);
        // The scores again, then the gradients of values, weights, queries and keys: five.
        let buffers = [q, k, v, out, lse, dout, &*dq, &*dk, &*dv];
        self.record(Kernel::attention(
            shape,
            spec.scores_per_head(),
            5.0,
            self.computed_in(q.dtype()),
            &buffers,
        ));
        if self.plans_cuda() && spec.elements() > 0 {
            let dtype = lse_dtype(q.dtype());
            q.memory()
                .alloc_workspace(dtype, spec.rows(), "attention_backward")?;
        }
        Ok(())
    }
}
