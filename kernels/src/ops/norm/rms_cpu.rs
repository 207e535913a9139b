//! CPU kernels of RMS normalization, forward and backward: one task per group of rows, sums
//! over a row and over rows in f64, the per-element arithmetic in the compute type.

use rayon::prelude::*;

use super::kernels::MAX_PARTIALS;
use crate::cpu::min_rows;
use crate::dtype::{Compute, Element, Float};
use crate::ops::elementwise::isa::in_best_isa;
use crate::ops::rows::spec::RowSpec;

/// `y = gamma * round(x * rstd)` for each row, `round` storing in `T` (nothing for f32 and
/// f64; for the half types it is Hugging Face's `weight * x_normed.to(input_dtype)`).
pub(super) fn rms_norm_rows<T: Float, S: Element>(
    spec: RowSpec,
    eps: f64,
    x: &[T],
    gamma: &[T],
    y: &mut [T],
    rstd: &mut [S],
) {
    let len = spec.len;
    if len == 0 {
        // Empty rows: mean square 0, by convention.
        rstd.fill(S::from_f64(1.0 / eps.sqrt()));
        return;
    }
    let n = len as f64;
    y.par_chunks_mut(len)
        .zip(x.par_chunks(len))
        .zip(rstd.par_iter_mut())
        .with_min_len(min_rows(len))
        .for_each(|((y, x), rstd_out)| {
            in_best_isa(
                #[inline(always)]
                || rms_row(eps, n, (x, gamma), y, rstd_out),
            )
        });
}

/// One row of [`rms_norm_rows`].
#[inline(always)]
fn rms_row<T: Float, S: Element>(
    eps: f64,
    n: f64,
    (x, gamma): (&[T], &[T]),
    y: &mut [T],
    rstd_out: &mut S,
) {
    let squares = x
        .iter()
        .map(|&v| {
            let v = v.load().f64();
            v * v
        })
        .sum::<f64>();
    let rstd = 1.0 / (squares / n + eps).sqrt();
    *rstd_out = S::from_f64(rstd);
    let r = T::C::of(rstd);
    for ((o, &v), &g) in y.iter_mut().zip(x).zip(gamma) {
        let normed = T::store(v.load() * r);
        *o = T::store(g.load() * normed.load());
    }
}

/// What the RMS-norm backward reads.
pub(super) struct RmsBackwardInputs<'a, T, S> {
    pub(super) x: &'a [T],
    pub(super) gamma: &'a [T],
    pub(super) rstd: &'a [S],
    pub(super) dy: &'a [T],
}

/// `dx` of every row, and `dgamma` summed over the rows: per block of rows (at most
/// [`MAX_PARTIALS`] blocks, whatever the threads), then the blocks' sums in block order.
pub(super) fn rms_norm_backward_rows<T: Float, S: Element>(
    spec: RowSpec,
    inputs: &RmsBackwardInputs<'_, T, S>,
    dx: &mut [T],
    dgamma: &mut [T],
) {
    let RowSpec { rows, len } = spec;
    if len == 0 {
        return;
    }
    let block = rows.div_ceil(MAX_PARTIALS).max(1);
    let partials: Vec<Vec<f64>> = dx
        .par_chunks_mut(block * len)
        .enumerate()
        .map(|(b, dx)| {
            let mut acc = vec![0f64; len];
            in_best_isa(
                #[inline(always)]
                || {
                    for (r, dx) in dx.chunks_mut(len).enumerate() {
                        rms_backward_row(inputs, b * block + r, len, dx, &mut acc);
                    }
                },
            );
            acc
        })
        .collect();
    let mut total = vec![0f64; len];
    for partial in &partials {
        for (t, &p) in total.iter_mut().zip(partial) {
            *t += p;
        }
    }
    for (o, &v) in dgamma.iter_mut().zip(&total) {
        *o = T::store(T::C::of(v));
    }
}

/// The backward pass of one row: with `g = dy gamma` and `xhat = x rstd`,
/// `dx = rstd (g - xhat mean(g xhat))`; adds the row's `dy xhat` into `dgamma` (f64).
#[inline(always)]
fn rms_backward_row<T: Float, S: Element>(
    inputs: &RmsBackwardInputs<'_, T, S>,
    row: usize,
    len: usize,
    dx: &mut [T],
    dgamma: &mut [f64],
) {
    let span = row * len..(row + 1) * len;
    let (x, dy) = (&inputs.x[span.clone()], &inputs.dy[span]);
    let rstd = inputs.rstd[row].to_f64();
    let mut sum_gx = 0f64;
    for j in 0..len {
        let xhat = x[j].load().f64() * rstd;
        let d = dy[j].load().f64();
        sum_gx += d * inputs.gamma[j].load().f64() * xhat;
        dgamma[j] += d * xhat;
    }
    let r = T::C::of(rstd);
    let mean_gx = T::C::of(sum_gx / len as f64);
    for ((o, (&v, &d)), &g) in dx.iter_mut().zip(x.iter().zip(dy)).zip(inputs.gamma) {
        let xhat = v.load() * r;
        *o = T::store(r * (d.load() * g.load() - xhat * mean_gx));
    }
}
