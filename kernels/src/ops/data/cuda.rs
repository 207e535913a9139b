//! CUDA kernels: fill, host transfers, copies and casts.

use super::kernels::{DataKernels, check_bytes, check_len, check_range};
use crate::buffer::{Buffer, PendingWork};
use crate::cuda::{CudaBackend, Family};
use crate::error::{Error, Result};

impl DataKernels for CudaBackend {
    fn fill(&self, out: &mut Buffer, value: f64) -> Result<()> {
        let n = out.len();
        if n == 0 {
            return Ok(());
        }
        let name = format!("fill_{}", out.dtype());
        self.launch(
            "fill",
            Family::Data,
            &name,
            self.grid(n as u64),
            &[out.into(), n.into(), value.into()],
        )
    }

    fn write(&self, out: &mut Buffer, bytes: &[u8]) -> Result<()> {
        check_bytes("write", out, bytes.len())?;
        self.copy_to_device("write", bytes, out.addr())
    }

    fn read(&self, src: &Buffer, bytes: &mut [u8]) -> Result<()> {
        check_bytes("read", src, bytes.len())?;
        self.copy_to_host("read", src.addr(), bytes)
    }

    unsafe fn read_queued(
        &self,
        src: &Buffer,
        bytes: &mut [u8],
    ) -> Result<Option<Box<dyn PendingWork>>> {
        check_bytes("read", src, bytes.len())?;
        // SAFETY: the caller keeps `bytes` allocated and untouched by the host until the
        // returned mark; `src` keeps the kernels' wait, queued before its memory is written
        // or reused.
        let (done, kernels_wait) = unsafe { self.copy_to_host_queued("read", src.addr(), bytes) }?;
        src.touched_later_by(Some(Box::new(kernels_wait)))?;
        Ok(Some(Box::new(done)))
    }

    unsafe fn write_queued(
        &self,
        out: &mut Buffer,
        bytes: &[u8],
    ) -> Result<Option<Box<dyn PendingWork>>> {
        check_bytes("write", out, bytes.len())?;
        // SAFETY: the caller's page-locked `bytes` stay allocated and unwritten until the
        // returned mark; `out` keeps the kernels' wait, queued before they use it.
        let (done, kernels_wait) =
            unsafe { self.copy_to_device_queued("write", bytes, out.addr()) }?;
        out.touched_later_by(Some(Box::new(kernels_wait)))?;
        Ok(Some(Box::new(done)))
    }

    fn copy(&self, src: &Buffer, dst: &mut Buffer) -> Result<()> {
        check_len("copy", src, dst)?;
        if src.dtype() != dst.dtype() {
            return Err(Error::DType {
                op: "copy",
                expected: src.dtype().to_string(),
                got: dst.dtype(),
            });
        }
        self.copy_device("copy", src.addr(), dst.addr(), src.bytes())
    }

    fn cast_range(
        &self,
        src: &Buffer,
        src_at: usize,
        dst: &mut Buffer,
        dst_at: usize,
        len: usize,
    ) -> Result<()> {
        check_range(src, src_at, dst, dst_at, len)?;
        let (from, to) = (src.dtype(), dst.dtype());
        let src_addr = src.addr() + (src_at * from.size()) as u64;
        let dst_addr = dst.addr() + (dst_at * to.size()) as u64;
        if from == to {
            return self.copy_device("cast", src_addr, dst_addr, len * from.size());
        }
        if len == 0 {
            return Ok(());
        }
        let name = format!("cast_{from}_{to}");
        self.launch(
            "cast",
            Family::Data,
            &name,
            self.grid(len as u64),
            &[src_addr.into(), dst_addr.into(), len.into()],
        )
    }

    fn synchronize(&self) -> Result<()> {
        self.wait("synchronize")
    }
}
