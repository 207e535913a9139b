//! CPU kernels for reductions.

use rayon::prelude::*;

use super::kernels::{ReduceKernels, ReduceOp, ReduceSpec};
use crate::buffer::Buffer;
use crate::cpu::{CpuBackend, with_float};
use crate::dtype::{Compute, Float};
use crate::error::Result;

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
