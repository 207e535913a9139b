//! Meta kernels: nothing to compute and no scratch memory on any backend; each accounts for
//! its work.

use super::kernels::{RotaryKernels, RotaryOperands, RotarySpec};
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::work::Kernel;

impl RotaryKernels for MetaBackend {
    fn rotary(&self, _: &RotarySpec, operands: RotaryOperands<'_>) -> Result<()> {
        let RotaryOperands {
            x, inv_freq, out, ..
        } = operands;
        // Per element: half a cosine and a sine (counted as 4 operations each), two products
        // and a sum.
        self.record(Kernel::moving_with(&[x, inv_freq, &*out], 7.0));
        Ok(())
    }
}
