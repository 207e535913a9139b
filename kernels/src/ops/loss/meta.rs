//! Meta kernels: nothing to compute (and no data to check targets against); planning for CUDA,
//! the row losses the CUDA kernel sums.

use super::kernels::{CrossEntropySpec, LossKernels};
use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::work::Kernel;

impl LossKernels for MetaBackend {
    fn cross_entropy(
        &self,
        spec: CrossEntropySpec,
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        self.record(Kernel::moving_with(&[logits, targets, out], 4.0));
        // On CUDA each row's loss goes to an f64 buffer before the ordered mean.
        if self.plans_cuda() {
            let memory = logits.memory();
            memory.alloc_workspace(DType::F64, spec.rows.max(1), "cross_entropy")?;
        }
        Ok(())
    }

    fn cross_entropy_backward(
        &self,
        _: CrossEntropySpec,
        a: &Buffer,
        b: &Buffer,
        c: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        self.record(Kernel::moving_with(&[a, b, c, out], 4.0));
        Ok(())
    }

    fn sliced_cross_entropy_parts(
        &self,
        _: CrossEntropySpec,
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        self.record(Kernel::moving_with(&[logits, targets, out], 4.0));
        Ok(())
    }

    fn sliced_cross_entropy_backward(
        &self,
        _: CrossEntropySpec,
        (lse, scale): (&Buffer, &Buffer),
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        self.record(Kernel::moving_with(
            &[lse, scale, logits, targets, out],
            2.0,
        ));
        Ok(())
    }
}
