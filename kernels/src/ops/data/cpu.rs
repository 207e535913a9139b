//! CPU kernels for data movement.

use rayon::prelude::*;

use crate::backend::DataKernels;
use crate::buffer::Buffer;
use crate::cpu::{CHUNK, CpuBackend, with_element};
use crate::dtype::Element;
use crate::error::{Error, Result};

/// Fails unless a host byte slice matches the buffer's size.
fn check_bytes(op: &'static str, buffer: &Buffer, bytes: usize) -> Result<()> {
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
fn check_len(op: &'static str, a: &Buffer, b: &Buffer) -> Result<()> {
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

impl DataKernels for CpuBackend {
    fn fill(&self, out: &mut Buffer, value: f64) -> Result<()> {
        with_element!(out.dtype(), |T| {
            let value = T::from_f64(value);
            out.host_mut::<T>("fill")?
                .par_chunks_mut(CHUNK)
                .for_each(|chunk| chunk.fill(value));
            Ok(())
        })
    }

    fn write(&self, out: &mut Buffer, bytes: &[u8]) -> Result<()> {
        check_bytes("write", out, bytes.len())?;
        with_element!(out.dtype(), |T| {
            let dst: &mut [u8] = bytemuck::cast_slice_mut(out.host_mut::<T>("write")?);
            dst.copy_from_slice(bytes);
            Ok(())
        })
    }

    fn read(&self, src: &Buffer, bytes: &mut [u8]) -> Result<()> {
        check_bytes("read", src, bytes.len())?;
        with_element!(src.dtype(), |T| {
            bytes.copy_from_slice(bytemuck::cast_slice(src.host::<T>("read")?));
            Ok(())
        })
    }

    fn copy(&self, src: &Buffer, dst: &mut Buffer) -> Result<()> {
        check_len("copy", src, dst)?;
        with_element!(src.dtype(), |T| {
            let from = src.host::<T>("copy")?;
            dst.host_mut::<T>("copy")?
                .par_chunks_mut(CHUNK)
                .zip(from.par_chunks(CHUNK))
                .for_each(|(to, from)| to.copy_from_slice(from));
            Ok(())
        })
    }

    fn cast(&self, src: &Buffer, dst: &mut Buffer) -> Result<()> {
        check_len("cast", src, dst)?;
        self.cast_range(src, 0, dst, 0, src.len())
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
        with_element!(src.dtype(), |S| {
            let from = &src.host::<S>("cast")?[src_at..src_at + len];
            with_element!(dst.dtype(), |D| {
                dst.host_mut::<D>("cast")?[dst_at..dst_at + len]
                    .par_chunks_mut(CHUNK)
                    .zip(from.par_chunks(CHUNK))
                    .for_each(|(to, from)| {
                        for (t, &f) in to.iter_mut().zip(from) {
                            *t = D::from_f64(f.to_f64());
                        }
                    });
                Ok(())
            })
        })
    }
}
