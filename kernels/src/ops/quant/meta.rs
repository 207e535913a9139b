//! Meta kernels: nothing to compute and no scratch memory on any backend.

use super::kernels::{DequantOperands, DequantSpec, GatherOperands, GatherSpec, QuantKernels};
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
}
