//! CPU kernels: dequantization, one task per group of blocks.

use rayon::prelude::*;

use super::kernels::{Codes, DequantOperands, DequantSpec, QuantKernels};
use crate::buffer::Buffer;
use crate::cpu::{CHUNK, CpuBackend, with_float};
use crate::dtype::{Compute, Float};
use crate::error::{Error, Result};
use crate::quant::nf4::LEVELS;

impl QuantKernels for CpuBackend {
    fn dequantize(&self, spec: &DequantSpec, operands: DequantOperands<'_>) -> Result<()> {
        const OP: &str = "dequantize";
        let DequantOperands {
            codes,
            scales,
            map,
            out,
        } = operands;
        let (codes, scales) = (codes.host::<u8>(OP)?, scales.host::<f32>(OP)?);
        let block = spec.block;
        match spec.codes {
            Codes::Nf4 => fill(out, |i| {
                let byte = codes[i / 2];
                let index = if i.is_multiple_of(2) {
                    byte >> 4
                } else {
                    byte & 0x0F
                };
                LEVELS[usize::from(index)] * scales[i / block]
            }),
            Codes::Int8 => fill(out, |i| {
                f32::from(codes[i] as i8) * (scales[i / block] / 127.0)
            }),
            Codes::Dynamic { offset } => {
                let map = map.ok_or_else(|| Error::Argument {
                    op: OP,
                    detail: "dynamic codes without their code book".into(),
                })?;
                let map = map.host::<f32>(OP)?;
                fill(out, |i| match scales[i / block] {
                    0.0 => offset,
                    scale => map[usize::from(codes[i])] * scale + offset,
                })
            }
        }
    }
}

/// `out[i] = value(i)`, rounded once to `out`'s float dtype.
fn fill(out: &mut Buffer, value: impl Fn(usize) -> f32 + Sync) -> Result<()> {
    const OP: &str = "dequantize";
    with_float!(out.dtype(), OP, |T| {
        fill_as::<T>(out.host_mut(OP)?, &value);
        Ok(())
    })
}

/// `out[i] = value(i)` in `T`.
fn fill_as<T: Float>(out: &mut [T], value: &(impl Fn(usize) -> f32 + Sync)) {
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(task, chunk)| {
            let first = task * CHUNK;
            for (i, o) in chunk.iter_mut().enumerate() {
                *o = T::store(T::C::of(f64::from(value(first + i))));
            }
        });
}
