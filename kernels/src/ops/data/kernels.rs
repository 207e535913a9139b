//! What a backend runs to move data (fills, host transfers, copies and casts), and the checks
//! its kernels make of their buffers.

use crate::buffer::{Buffer, PendingWork};
use crate::error::{Error, Result};

/// Moving data: fill, host transfers, copies and casts.
pub trait DataKernels {
    /// Sets every element of `out` to `value` (converted to its dtype).
    fn fill(&self, out: &mut Buffer, value: f64) -> Result<()>;
    /// Copies host bytes (exactly `out.bytes()` of them) into `out`.
    fn write(&self, out: &mut Buffer, bytes: &[u8]) -> Result<()>;
    /// Copies `src` into host bytes (exactly `src.bytes()` of them).
    fn read(&self, src: &Buffer, bytes: &mut [u8]) -> Result<()>;
    /// [`read`](Self::read), queued: a backend whose work waits in a queue (a GPU's) returns
    /// before the bytes arrive, with the mark the host waits for before it touches them, and
    /// notes on `src` that the device waits for the copy before it overwrites or frees `src`;
    /// a synchronous one copies them at once and returns no mark.
    ///
    /// # Safety
    /// `bytes` must stay allocated, and the host must neither read nor write them, until the
    /// returned mark has been reached (the memory of a host buffer that waits for it before the
    /// host touches or frees it: [`Buffer::touched_later_by`]).
    unsafe fn read_queued(
        &self,
        src: &Buffer,
        bytes: &mut [u8],
    ) -> Result<Option<Box<dyn PendingWork>>> {
        self.read(src, bytes).map(|()| None)
    }
    /// [`write`](Self::write) from host memory the device can read as the copy runs (the host
    /// tier's), queued: a backend whose work waits in a queue returns before the bytes have
    /// been read, with the mark the host waits for before it writes or frees them, and notes
    /// on `out` the wait its kernels queue before they use it (settled where it is handed
    /// over, written or freed). A synchronous one copies them at once and returns no mark.
    ///
    /// # Safety
    /// `bytes` must be such memory (page-locked for a GPU), stay allocated and go unwritten
    /// until the returned mark has been reached.
    unsafe fn write_queued(
        &self,
        out: &mut Buffer,
        bytes: &[u8],
    ) -> Result<Option<Box<dyn PendingWork>>> {
        self.write(out, bytes).map(|()| None)
    }
    /// Copies `src` into `dst` (same dtype and length).
    fn copy(&self, src: &Buffer, dst: &mut Buffer) -> Result<()>;
    /// Converts every element of `src` into `dst`'s dtype (same length).
    fn cast(&self, src: &Buffer, dst: &mut Buffer) -> Result<()> {
        check_len("cast", src, dst)?;
        self.cast_range(src, 0, dst, 0, src.len())
    }
    /// Converts the `len` elements of `src` from index `src_at` into `dst`'s dtype, at
    /// `dst[dst_at..]`; a range past either buffer's end is an argument error.
    fn cast_range(
        &self,
        src: &Buffer,
        src_at: usize,
        dst: &mut Buffer,
        dst_at: usize,
        len: usize,
    ) -> Result<()>;
    /// Waits until every kernel queued so far has finished; a synchronous backend has nothing
    /// to wait for.
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

/// Fails unless a host byte slice matches the buffer's size.
pub(crate) fn check_bytes(op: &'static str, buffer: &Buffer, bytes: usize) -> Result<()> {
    if bytes == buffer.bytes() {
        Ok(())
    } else {
        Err(Error::Argument {
            op,
            detail: format!("{bytes} host bytes for a buffer of {}", buffer.bytes()),
        })
    }
}

/// Fails unless two buffers hold as many elements.
pub(crate) fn check_len(op: &'static str, a: &Buffer, b: &Buffer) -> Result<()> {
    if a.len() == b.len() {
        Ok(())
    } else {
        Err(Error::Argument {
            op,
            detail: format!("{} elements into {}", a.len(), b.len()),
        })
    }
}

/// Fails unless `len` elements from `src_at` and from `dst_at` lie inside their buffers.
pub(crate) fn check_range(
    src: &Buffer,
    src_at: usize,
    dst: &Buffer,
    dst_at: usize,
    len: usize,
) -> Result<()> {
    let fits =
        |at: usize, buffer: &Buffer| at.checked_add(len).is_some_and(|end| end <= buffer.len());
    if fits(src_at, src) && fits(dst_at, dst) {
        Ok(())
    } else {
        Err(Error::Argument {
            op: "cast",
            detail: format!(
                "{len} elements from {src_at} of {} into {dst_at} of {}",
                src.len(),
                dst.len()
            ),
        })
    }
}
