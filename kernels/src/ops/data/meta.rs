//! Meta kernels for data movement: nothing to move, and nothing to read; each accounts for
//! the bytes it would move.

use super::kernels::{DataKernels, check_range};
use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::meta::MetaBackend;
use crate::work::Kernel;

impl DataKernels for MetaBackend {
    fn fill(&self, out: &mut Buffer, _: f64) -> Result<()> {
        self.record(Kernel::moving(&[out]));
        Ok(())
    }
    fn write(&self, out: &mut Buffer, _: &[u8]) -> Result<()> {
        self.record(Kernel::moving(&[out]));
        Ok(())
    }
    fn read(&self, src: &Buffer, _: &mut [u8]) -> Result<()> {
        Err(Error::NoData {
            op: "read",
            device: src.memory().to_string(),
        })
    }
    fn copy(&self, src: &Buffer, dst: &mut Buffer) -> Result<()> {
        self.record(Kernel::moving(&[src, dst]));
        Ok(())
    }
    fn cast(&self, src: &Buffer, dst: &mut Buffer) -> Result<()> {
        self.record(Kernel::moving(&[src, dst]));
        Ok(())
    }
    fn cast_range(
        &self,
        src: &Buffer,
        src_at: usize,
        dst: &mut Buffer,
        dst_at: usize,
        len: usize,
    ) -> Result<()> {
        // Nothing to convert, but a bad range fails here as it would on a real device.
        check_range(src, src_at, dst, dst_at, len)?;
        self.record(Kernel::converting(len, src.dtype(), dst.dtype()));
        Ok(())
    }
}
