//! Meta kernels: nothing to compute.

use crate::backend::optim::{AdamW, OptimKernels, QuantizedMut, Sgd, Update};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::meta::MetaBackend;

impl OptimKernels for MetaBackend {
    fn adamw(
        &self,
        _: &AdamW,
        _: Update,
        _: &mut Buffer,
        _: &Buffer,
        _: &mut Buffer,
        _: &mut Buffer,
    ) -> Result<()> {
        Ok(())
    }

    fn adamw_8bit(
        &self,
        _: &AdamW,
        _: Update,
        _: &mut Buffer,
        _: &Buffer,
        _: QuantizedMut<'_>,
        _: QuantizedMut<'_>,
    ) -> Result<()> {
        Ok(())
    }

    fn sgd(
        &self,
        _: &Sgd,
        _: Update,
        _: &mut Buffer,
        _: &Buffer,
        _: Option<&mut Buffer>,
    ) -> Result<()> {
        Ok(())
    }
}
