//! CPU kernels for data movement.

use rayon::prelude::*;

use super::kernels::{DataKernels, check_bytes, check_len, check_range};
use crate::buffer::Buffer;
use crate::cpu::{CHUNK, CpuBackend, with_element};
use crate::dtype::Element;
use crate::error::Result;

impl DataKernels for CpuBackend {
    fn fill(&self, out: &mut Buffer, value: f64) -> Result<()> {
        with_element!(out.dtype(), |T| {
            let value = <T as Element>::from_f64(value);
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

    fn cast_range(
        &self,
        src: &Buffer,
        src_at: usize,
        dst: &mut Buffer,
        dst_at: usize,
        len: usize,
    ) -> Result<()> {
        check_range(src, src_at, dst, dst_at, len)?;
        if src.dtype() == dst.dtype() {
            return with_element!(src.dtype(), |S| {
                let from = &src.host::<S>("cast")?[src_at..src_at + len];
                dst.host_mut::<S>("cast")?[dst_at..dst_at + len].copy_from_slice(from);
                Ok(())
            });
        }
        with_element!(src.dtype(), |S| {
            let from = &src.host::<S>("cast")?[src_at..src_at + len];
            with_element!(dst.dtype(), |D| {
                dst.host_mut::<D>("cast")?[dst_at..dst_at + len]
                    .par_chunks_mut(CHUNK)
                    .zip(from.par_chunks(CHUNK))
                    .for_each(|(to, from)| {
                        for (t, &f) in to.iter_mut().zip(from) {
                            *t = <D as Element>::from_f64(f.to_f64());
                        }
                    });
                Ok(())
            })
        })
    }
}
