//! CPU kernels: dequantization, one task per group of blocks.

use half::{bf16, f16};
use rayon::prelude::*;

use super::few_rows::{decode_block, nf4_few_rows};
use super::kernels::{
    Codes, DequantOperands, DequantSpec, GatherOperands, GatherSpec, Nf4ProductOperands,
    Nf4ProductSpec, QuantKernels, code_book, nf4_tables,
};
use crate::buffer::Buffer;
use crate::cpu::{CHUNK, CpuBackend, with_float};
use crate::dtype::{Compute, DType, Float};
use crate::error::{Error, Result};
use crate::ops::index::kernels::check_range;
use crate::quantize::nf4::LEVELS;

impl QuantKernels for CpuBackend {
    fn has_nf4_few_rows(&self) -> bool {
        true
    }

    fn nf4_few_rows(&self, spec: &Nf4ProductSpec, operands: Nf4ProductOperands<'_>) -> Result<()> {
        match operands.x.dtype() {
            DType::F32 => nf4_few_rows::<f32>(spec, operands),
            DType::BF16 => nf4_few_rows::<bf16>(spec, operands),
            DType::F16 => nf4_few_rows::<f16>(spec, operands),
            other => Err(Error::DType {
                op: "nf4_few_rows",
                expected: "f32, bf16 or f16".into(),
                got: other,
            }),
        }
    }

    fn gather_rows(&self, spec: &GatherSpec, operands: GatherOperands<'_>) -> Result<()> {
        gather(spec, operands)
    }

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
            Codes::Nf4 => fill_blocks(out, block, |b, values| {
                let table = LEVELS.map(|level| level * scales[b]);
                // A block holds an even number of values, so it starts at a byte.
                decode_block(&table, &codes[b * block / 2..], values);
            }),
            Codes::Int8 => fill_blocks(out, block, |b, values| {
                let scale = scales[b] / 127.0;
                for (v, &code) in values.iter_mut().zip(&codes[b * block..]) {
                    *v = f32::from(code as i8) * scale;
                }
            }),
            Codes::Dynamic { offset } => {
                let map = code_book(map, OP)?.host::<f32>(OP)?;
                fill_blocks(out, block, |b, values| match scales[b] {
                    0.0 => values.fill(offset),
                    scale => {
                        for (v, &code) in values.iter_mut().zip(&codes[b * block..]) {
                            *v = map[usize::from(code)] * scale + offset;
                        }
                    }
                })
            }
        }
    }
}

/// `out`'s values a block of `block` at a time: `values(b, slots)` writes block `b`'s values
/// (`block` of them, fewer in the last) in f32, each then rounded once to `out`'s dtype.
fn fill_blocks(
    out: &mut Buffer,
    block: usize,
    values: impl Fn(usize, &mut [f32]) + Sync,
) -> Result<()> {
    const OP: &str = "dequantize";
    with_float!(out.dtype(), OP, |T| {
        fill_blocks_as::<T>(out.host_mut(OP)?, block, &values);
        Ok(())
    })
}

/// [`fill_blocks`] into `out` of `T`, a task per group of blocks.
fn fill_blocks_as<T: Float>(
    out: &mut [T],
    block: usize,
    values: &(impl Fn(usize, &mut [f32]) + Sync),
) {
    let blocks_per_task = (CHUNK / block).max(1);
    out.par_chunks_mut(blocks_per_task * block)
        .enumerate()
        .for_each_init(
            || vec![0f32; block],
            |slots, (task, chunk)| {
                for (b, chunk) in chunk.chunks_mut(block).enumerate() {
                    let slots = &mut slots[..chunk.len()];
                    values(task * blocks_per_task + b, slots);
                    for (o, &v) in chunk.iter_mut().zip(slots.iter()) {
                        *o = T::store(T::C::of(f64::from(v)));
                    }
                }
            },
        );
}

/// Each NF4 block's scale from its dynamic-map code: as [`Codes::Dynamic`] dequantizes it.
fn nf4_scale(
    scale_codes: &[u8],
    absmax: &[f32],
    map: &[f32],
    block: usize,
    spec: &GatherSpec,
) -> f32 {
    match absmax[block / spec.scale_block.max(1)] {
        0.0 => spec.offset,
        scale => map[usize::from(scale_codes[block])] * scale + spec.offset,
    }
}

/// The gathered rows' values, `out[i * width + j]` from row `ids[i]`.
fn gather(spec: &GatherSpec, operands: GatherOperands<'_>) -> Result<()> {
    const OP: &str = "gather_rows";
    let GatherOperands {
        codes,
        scales,
        scale_codes,
        map,
        ids,
        out,
    } = operands;
    let ids = ids.host::<u32>(OP)?;
    check_range(OP, "id", ids, spec.rows, None)?;
    let (codes, scales) = (codes.host::<u8>(OP)?, scales.host::<f32>(OP)?);
    let (width, block) = (spec.width.max(1), spec.block);
    let at = |i: usize| ids[i / width] as usize * spec.width + i % width;
    match spec.codes {
        Codes::Nf4 => {
            let (scale_codes, map) = nf4_tables(scale_codes, map, OP)?;
            let (scale_codes, map) = (scale_codes.host::<u8>(OP)?, map.host::<f32>(OP)?);
            fill(out, |i| {
                let v = at(i);
                let byte = codes[v / 2];
                let index = if v.is_multiple_of(2) {
                    byte >> 4
                } else {
                    byte & 0x0F
                };
                LEVELS[usize::from(index)] * nf4_scale(scale_codes, scales, map, v / block, spec)
            })
        }
        _ => fill(out, |i| {
            let v = at(i);
            f32::from(codes[v] as i8) * (scales[v / block] / 127.0)
        }),
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
