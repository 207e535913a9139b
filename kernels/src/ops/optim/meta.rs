//! Meta kernels: nothing to compute; each accounts for its work.

use super::kernels::{AdamW, AdamWOperands, OptimKernels, QuantizedMut, Sgd, Update};
use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::work::Kernel;

impl OptimKernels for MetaBackend {
    fn adamw(&self, _: &AdamW, _: Update, operands: AdamWOperands<'_, &mut Buffer>) -> Result<()> {
        let AdamWOperands { param, grad, m, v } = operands;
        // Each state buffer read and written; each bf16 value stored rounds stochastically,
        // on one draw an element (three operations, and one a rounding).
        let rounded = [&*param, &*m, &*v]
            .iter()
            .filter(|b| b.dtype() == DType::BF16)
            .count() as f64;
        let draw = if rounded > 0.0 { 3.0 } else { 0.0 };
        let buffers = [&*param, &*param, grad, &*m, &*m, &*v, &*v];
        self.record(Kernel::moving_with(&buffers, 12.0 + draw + rounded));
        Ok(())
    }

    fn adamw_8bit(
        &self,
        _: &AdamW,
        _: Update,
        operands: AdamWOperands<'_, QuantizedMut<'_>>,
    ) -> Result<()> {
        let AdamWOperands { param, grad, m, v } = operands;
        let (m, v) = (&*m.codes, &*v.codes);
        let buffers = [&*param, &*param, grad, m, m, v, v];
        // Decoding and encoding (a search over the codes) on top of the update.
        self.record(Kernel::moving_with(&buffers, 60.0));
        Ok(())
    }

    fn sgd(
        &self,
        _: &Sgd,
        _: Update,
        param: &mut Buffer,
        grad: &Buffer,
        momentum: Option<&mut Buffer>,
    ) -> Result<()> {
        let mut buffers = vec![&*param, &*param, grad];
        if let Some(momentum) = momentum.as_deref() {
            buffers.extend([momentum, momentum]);
        }
        self.record(Kernel::moving_with(&buffers, 4.0));
        Ok(())
    }
}
