//! Meta kernels for reductions: nothing to compute; planning for CUDA, the workspace of the
//! partial results of an axis cut into parts ([`ReduceSpec::parts`]).

use super::kernels::{ReduceKernels, ReduceOp, ReduceSpec};
use crate::DType;
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::work::Kernel;

impl ReduceKernels for MetaBackend {
    fn reduce(&self, op: ReduceOp, spec: ReduceSpec, x: &Buffer, out: &mut Buffer) -> Result<()> {
        self.record(Kernel::moving(&[x, out]));
        let parts = spec.parts();
        if self.plans_cuda() && parts > 1 && !out.is_empty() {
            let partials = 2 * spec.outer * parts * spec.inner;
            x.memory()
                .alloc_workspace(DType::F64, partials, op.name())?;
        }
        Ok(())
    }
}
