//! CPU kernels for data movement.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

use super::kernels::{DataKernels, check_bytes, check_len, check_range};
use crate::buffer::Buffer;
use crate::cpu::{CHUNK, CpuBackend, with_element};
use crate::dtype::{DType, Element, Float};
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
        let at = (src_at, dst_at, len);
        // Between f32 and a half type by the half type's own conversions, which vectorize (F16C
        // for f16); the rest through f64, exact for every float.
        match (src.dtype(), dst.dtype()) {
            (DType::BF16, DType::F32) => convert(src, dst, at, |from: &[bf16], to: &mut [f32]| {
                for (t, &f) in to.iter_mut().zip(from) {
                    *t = f.load();
                }
            }),
            (DType::F32, DType::BF16) => convert(src, dst, at, |from: &[f32], to: &mut [bf16]| {
                to.convert_from_f32_slice(from)
            }),
            (DType::F16, DType::F32) => convert(src, dst, at, |from: &[f16], to: &mut [f32]| {
                from.convert_to_f32_slice(to)
            }),
            (DType::F32, DType::F16) => convert(src, dst, at, |from: &[f32], to: &mut [f16]| {
                to.convert_from_f32_slice(from)
            }),
            (from, to) => with_element!(from, |S| {
                with_element!(to, |D| {
                    convert(src, dst, at, |from: &[S], to: &mut [D]| {
                        for (t, &f) in to.iter_mut().zip(from) {
                            *t = <D as Element>::from_f64(f.to_f64());
                        }
                    })
                })
            }),
        }
    }
}

/// Converts `at.2` elements of `src` from `at.0` into `dst` from `at.1`, a chunk at a time in
/// parallel, by `each`.
fn convert<S: Element, D: Element>(
    src: &Buffer,
    dst: &mut Buffer,
    (src_at, dst_at, len): (usize, usize, usize),
    each: impl Fn(&[S], &mut [D]) + Sync,
) -> Result<()> {
    let from = &src.host::<S>("cast")?[src_at..src_at + len];
    dst.host_mut::<D>("cast")?[dst_at..dst_at + len]
        .par_chunks_mut(CHUNK)
        .zip(from.par_chunks(CHUNK))
        .for_each(|(to, from)| each(from, to));
    Ok(())
}
