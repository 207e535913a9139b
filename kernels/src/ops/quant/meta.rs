//! Meta kernels: nothing to compute and no scratch memory on any backend.

use super::kernels::{DequantOperands, DequantSpec, QuantKernels};
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
}
