//! CPU kernels: softmax and log-softmax, forward and backward.
//!
//! Every kernel runs one task per group of rows. Sums over a row accumulate in f64; the
//! per-element arithmetic runs in the compute type (f32 for the half types).

use rayon::prelude::*;

use super::kernels::{SoftmaxKernels, SoftmaxKind, SoftmaxSpec};
use crate::buffer::Buffer;
use crate::cpu::{CpuBackend, min_rows, with_float};
use crate::dtype::{Compute, Float};
use crate::error::Result;
use crate::ops::rows::spec::RowSpec;

impl SoftmaxKernels for CpuBackend {
    fn softmax(
        &self,
        softmax: SoftmaxSpec,
        spec: RowSpec,
        x: &Buffer,
        y: &mut Buffer,
    ) -> Result<()> {
        let op = softmax.kind.name();
        with_float!(x.dtype(), op, |T| {
            let x = x.host::<T>(op)?;
            let y = y.host_mut::<T>(op)?;
            softmax_rows::<T>(softmax, spec, x, y);
            Ok(())
        })
    }

    fn softmax_backward(
        &self,
        softmax: SoftmaxSpec,
        spec: RowSpec,
        y: &Buffer,
        dy: &Buffer,
        dx: &mut Buffer,
    ) -> Result<()> {
        let op = softmax.kind.backward_name();
        with_float!(y.dtype(), op, |T| {
            let y = y.host::<T>(op)?;
            let dy = dy.host::<T>(op)?;
            let dx = dx.host_mut::<T>(op)?;
            softmax_backward_rows::<T>(softmax, spec, y, dy, dx);
            Ok(())
        })
    }
}

/// The largest element of a row (NaN-propagating) and `sum_j exp(row[j] - max)` in f64.
/// The largest of `scale * x` over `row` and the sum of `exp(scale * x - max)`, the sum taken in
/// blocks of the compute type (so that the exponentials vectorize) added up in f64.
fn max_and_sum_exp_scaled<T: Float>(row: &[T], scale: T::C) -> (T::C, f64) {
    let max = row
        .iter()
        .fold(T::C::NEG_INFINITY, |m, &v| m.max(scale * v.load()));
    let sum = row
        .chunks(64)
        .map(|block| {
            block
                .iter()
                .fold(T::C::ZERO, |s, &v| s + (scale * v.load() - max).exp())
                .f64()
        })
        .sum();
    (max, sum)
}

/// The columns of row `r` that a softmax reads: all, or up to the diagonal when causal.
fn visible(softmax: SoftmaxSpec, len: usize, r: usize) -> usize {
    if softmax.causal { r % len + 1 } else { len }
}

fn softmax_rows<T: Float>(softmax: SoftmaxSpec, spec: RowSpec, x: &[T], y: &mut [T]) {
    if spec.len == 0 || y.is_empty() {
        return;
    }
    let scale = T::C::of(softmax.scale);
    y.par_chunks_mut(spec.len)
        .zip(x.par_chunks(spec.len))
        .enumerate()
        .with_min_len(min_rows(spec.len))
        .for_each(|(r, (y, x))| {
            let seen = visible(softmax, spec.len, r);
            let (max, sum) = max_and_sum_exp_scaled(&x[..seen], scale);
            let (y, hidden) = y.split_at_mut(seen);
            match softmax.kind {
                SoftmaxKind::Softmax => {
                    let inv = T::C::of(1.0 / sum);
                    for (o, &v) in y.iter_mut().zip(x) {
                        *o = T::store((scale * v.load() - max).exp() * inv);
                    }
                    hidden.fill(T::store(T::C::ZERO));
                }
                SoftmaxKind::LogSoftmax => {
                    let log_sum = T::C::of(sum.ln());
                    for (o, &v) in y.iter_mut().zip(x) {
                        *o = T::store(scale * v.load() - max - log_sum);
                    }
                    hidden.fill(T::store(T::C::NEG_INFINITY));
                }
            }
        });
}

fn softmax_backward_rows<T: Float>(
    softmax: SoftmaxSpec,
    spec: RowSpec,
    y: &[T],
    dy: &[T],
    dx: &mut [T],
) {
    if spec.len == 0 || dx.is_empty() {
        return;
    }
    let scale = T::C::of(softmax.scale);
    dx.par_chunks_mut(spec.len)
        .zip(y.par_chunks(spec.len).zip(dy.par_chunks(spec.len)))
        .enumerate()
        .with_min_len(min_rows(spec.len))
        .for_each(|(r, (dx, (y, dy)))| {
            let seen = visible(softmax, spec.len, r);
            let (dx, hidden) = dx.split_at_mut(seen);
            let (y, dy) = (&y[..seen], &dy[..seen]);
            match softmax.kind {
                SoftmaxKind::Softmax => {
                    let dot: f64 = y
                        .iter()
                        .zip(dy)
                        .map(|(&y, &d)| y.load().f64() * d.load().f64())
                        .sum();
                    let dot = T::C::of(dot);
                    for ((o, &y), &d) in dx.iter_mut().zip(y).zip(dy) {
                        *o = T::store(scale * y.load() * (d.load() - dot));
                    }
                }
                SoftmaxKind::LogSoftmax => {
                    let sum = T::C::of(dy.iter().map(|&d| d.load().f64()).sum());
                    for ((o, &y), &d) in dx.iter_mut().zip(y).zip(dy) {
                        *o = T::store(scale * (d.load() - y.load().exp() * sum));
                    }
                }
            }
            hidden.fill(T::store(T::C::ZERO));
        });
}
