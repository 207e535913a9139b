//! Meta kernels: nothing to compute and no scratch memory on any backend; a few rows against
//! NF4 codes where the plan is for a CPU.

use super::kernels::{
    DequantOperands, DequantSpec, GatherOperands, GatherSpec, Nf4ProductOperands, Nf4ProductSpec,
    QuantKernels,
};
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::work::Kernel;

impl QuantKernels for MetaBackend {
    fn dequantize(&self, _: &DequantSpec, operands: DequantOperands<'_>) -> Result<()> {
        let DequantOperands {
            codes, scales, out, ..
        } = operands;
        // Per value: a table lookup and a product.
        self.record(Kernel::moving_with(&[codes, scales, &*out], 2.0));
        Ok(())
    }

    fn gather_rows(&self, _: &GatherSpec, operands: GatherOperands<'_>) -> Result<()> {
        let GatherOperands { ids, out, .. } = operands;
        // Per value: two table lookups and two products.
        self.record(Kernel::moving_with(&[ids, &*out], 4.0));
        Ok(())
    }

    /// Where it plans for a CPU, which has the kernel.
    fn has_nf4_few_rows(&self) -> bool {
        !self.plans_cuda()
    }

    fn nf4_few_rows(&self, spec: &Nf4ProductSpec, operands: Nf4ProductOperands<'_>) -> Result<()> {
        let Nf4ProductOperands {
            x,
            codes,
            scales,
            out,
        } = operands;
        let buffers = [x, codes, scales, &*out];
        self.record(Kernel::product(&spec.as_product(), x.dtype(), &buffers));
        Ok(())
    }
}
