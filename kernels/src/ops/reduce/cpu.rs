//! CPU kernels for reductions.

use rayon::prelude::*;

use super::kernels::{ReduceKernels, ReduceOp, ReduceSpec};
use crate::buffer::Buffer;
use crate::cpu::{CHUNK, CpuBackend, with_float};
use crate::dtype::{Compute, Float};
use crate::error::Result;
use crate::ops::elementwise::isa::in_best_isa;

impl ReduceKernels for CpuBackend {
    fn reduce(&self, op: ReduceOp, spec: ReduceSpec, x: &Buffer, out: &mut Buffer) -> Result<()> {
        with_float!(x.dtype(), op.name(), |T| {
            let x = x.host::<T>(op.name())?;
            let out = out.host_mut::<T>(op.name())?;
            reduce_into::<T>(op, spec, x, out);
            Ok(())
        })
    }
}

fn reduce_into<T: Float>(op: ReduceOp, spec: ReduceSpec, x: &[T], out: &mut [T]) {
    let ReduceSpec { axis, inner, .. } = spec;
    if out.is_empty() {
        return;
    }
    if inner == 1 && axis >= CHUNK {
        // A whole long axis per output (a gradient's norm): its chunks in parallel instead.
        for (o, out) in out.iter_mut().enumerate() {
            *out = T::store(T::C::of(whole_axis(op, &x[o * axis..(o + 1) * axis])));
        }
        return;
    }
    // One task per outer index: it reads `axis` rows of `inner` contiguous elements.
    out.par_chunks_mut(inner).enumerate().for_each(|(o, out)| {
        let block = &x[o * axis * inner..(o + 1) * axis * inner];
        match op {
            ReduceOp::Sum | ReduceOp::Mean | ReduceOp::SumSquares => {
                let mut acc = vec![0f64; inner];
                let square = op == ReduceOp::SumSquares;
                for row in block.chunks_exact(inner) {
                    for (a, &v) in acc.iter_mut().zip(row) {
                        let v = v.load().f64();
                        *a += if square { v * v } else { v };
                    }
                }
                let divisor = if op == ReduceOp::Mean {
                    axis as f64
                } else {
                    1.0
                };
                for (o, a) in out.iter_mut().zip(acc) {
                    *o = T::store(T::C::of(a / divisor));
                }
            }
            ReduceOp::Max => {
                out.fill(T::store(T::C::NEG_INFINITY));
                for row in block.chunks_exact(inner) {
                    for (o, &v) in out.iter_mut().zip(row) {
                        *o = T::store(o.load().max(v.load()));
                    }
                }
            }
        }
    });
}

/// `fold` over `x` in f64, in 8 lanes (element `i` into lane `i % 8`, the remainder past whole
/// rows of 8 into its own), the lanes then combined in order by `combine`.
#[inline(always)]
fn in_lanes<T: Float>(
    x: &[T],
    init: f64,
    fold: impl Fn(f64, f64) -> f64,
    combine: impl Fn(f64, f64) -> f64,
) -> f64 {
    const LANES: usize = 8;
    let mut lanes = [init; LANES];
    let rows = x.chunks_exact(LANES);
    let mut last = init;
    for &v in rows.remainder() {
        last = fold(last, v.load().f64());
    }
    for row in rows {
        for (lane, &v) in lanes.iter_mut().zip(row) {
            *lane = fold(*lane, v.load().f64());
        }
    }
    lanes.into_iter().fold(last, combine)
}

/// `op` over all of `x` (contiguous), in f64 (a NaN wins the maximum): chunks of [`CHUNK`] in parallel, each in 8
/// lanes, the chunks' results combined in order, so the value does not depend on the threads.
fn whole_axis<T: Float>(op: ReduceOp, x: &[T]) -> f64 {
    let chunk = |x: &[T]| -> f64 {
        // Each fold a closure of its own (not a function pointer), so that the lanes vectorize.
        match op {
            ReduceOp::Max => in_best_isa(
                #[inline(always)]
                || in_lanes(x, f64::NEG_INFINITY, Compute::max, Compute::max),
            ),
            ReduceOp::Sum | ReduceOp::Mean => in_best_isa(
                #[inline(always)]
                || in_lanes(x, 0.0, |a, v| a + v, |a, b| a + b),
            ),
            ReduceOp::SumSquares => in_best_isa(
                #[inline(always)]
                || in_lanes(x, 0.0, |a, v| a + v * v, |a, b| a + b),
            ),
        }
    };
    let parts: Vec<f64> = x.par_chunks(CHUNK).map(chunk).collect();
    match op {
        ReduceOp::Max => parts.into_iter().fold(f64::NEG_INFINITY, Compute::max),
        ReduceOp::Sum | ReduceOp::SumSquares => parts.into_iter().sum(),
        ReduceOp::Mean => parts.into_iter().sum::<f64>() / x.len() as f64,
    }
}
