//! CPU kernels: layer normalization and RMS normalization, forward and backward.
//!
//! Every kernel runs one task per group of rows. Sums over a row accumulate in f64; the
//! per-element arithmetic runs in the compute type (f32 for the half types).

use rayon::prelude::*;

use super::kernels::{
    LayerNormBackwardOperands, LayerNormOperands, MAX_PARTIALS, NormKernels,
    RmsNormBackwardOperands, RmsNormOperands,
};
use super::rms_cpu::{RmsBackwardInputs, rms_norm_backward_rows, rms_norm_rows};
use crate::cpu::{CpuBackend, min_rows};
use crate::dtype::{Compute, DType, Element, Float};
use crate::error::{Error, Result};
use crate::ops::rows::spec::RowSpec;

/// Runs `$body` with `$t` bound to the Rust type of a float `$dtype` and `$s` to the type of
/// its layer-norm statistics (f64 for f64, f32 otherwise), or fails naming `$op`.
macro_rules! with_float_and_stats {
    ($dtype:expr, $op:expr, |$t:ident, $s:ident| $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $t = f32;
                type $s = f32;
                $body
            }
            DType::F64 => {
                type $t = f64;
                type $s = f64;
                $body
            }
            DType::F16 => {
                type $t = half::f16;
                type $s = f32;
                $body
            }
            DType::BF16 => {
                type $t = half::bf16;
                type $s = f32;
                $body
            }
            other => Err(Error::DType {
                op: $op,
                expected: "a float dtype".into(),
                got: other,
            }),
        }
    };
}

impl NormKernels for CpuBackend {
    fn layer_norm(&self, spec: RowSpec, eps: f64, operands: LayerNormOperands<'_>) -> Result<()> {
        let LayerNormOperands {
            x,
            gamma,
            beta,
            y,
            mean,
            rstd,
        } = operands;
        const OP: &str = "layer_norm";
        with_float_and_stats!(x.dtype(), OP, |T, S| {
            let x = x.host::<T>(OP)?;
            let gamma = gamma.host::<T>(OP)?;
            let beta = beta.host::<T>(OP)?;
            let y = y.host_mut::<T>(OP)?;
            let mean = mean.host_mut::<S>(OP)?;
            let rstd = rstd.host_mut::<S>(OP)?;
            layer_norm_rows::<T, S>(spec, eps, x, (gamma, beta), y, mean, rstd);
            Ok(())
        })
    }

    fn layer_norm_backward(
        &self,
        spec: RowSpec,
        operands: LayerNormBackwardOperands<'_>,
    ) -> Result<()> {
        let LayerNormBackwardOperands {
            x,
            gamma,
            mean,
            rstd,
            dy,
            dx,
            dgamma,
            dbeta,
        } = operands;
        const OP: &str = "layer_norm_backward";
        with_float_and_stats!(x.dtype(), OP, |T, S| {
            let inputs = BackwardInputs {
                x: x.host::<T>(OP)?,
                gamma: gamma.host::<T>(OP)?,
                mean: mean.host::<S>(OP)?,
                rstd: rstd.host::<S>(OP)?,
                dy: dy.host::<T>(OP)?,
            };
            let dx = dx.host_mut::<T>(OP)?;
            let dgamma = dgamma.host_mut::<T>(OP)?;
            let dbeta = dbeta.host_mut::<T>(OP)?;
            layer_norm_backward_rows::<T, S>(spec, &inputs, dx, dgamma, dbeta);
            Ok(())
        })
    }

    fn rms_norm(&self, spec: RowSpec, eps: f64, operands: RmsNormOperands<'_>) -> Result<()> {
        let RmsNormOperands { x, gamma, y, rstd } = operands;
        const OP: &str = "rms_norm";
        with_float_and_stats!(x.dtype(), OP, |T, S| {
            let x = x.host::<T>(OP)?;
            let gamma = gamma.host::<T>(OP)?;
            let y = y.host_mut::<T>(OP)?;
            let rstd = rstd.host_mut::<S>(OP)?;
            rms_norm_rows::<T, S>(spec, eps, x, gamma, y, rstd);
            Ok(())
        })
    }

    fn rms_norm_backward(
        &self,
        spec: RowSpec,
        operands: RmsNormBackwardOperands<'_>,
    ) -> Result<()> {
        let RmsNormBackwardOperands {
            x,
            gamma,
            rstd,
            dy,
            dx,
            dgamma,
        } = operands;
        const OP: &str = "rms_norm_backward";
        with_float_and_stats!(x.dtype(), OP, |T, S| {
            let inputs = RmsBackwardInputs {
                x: x.host::<T>(OP)?,
                gamma: gamma.host::<T>(OP)?,
                rstd: rstd.host::<S>(OP)?,
                dy: dy.host::<T>(OP)?,
            };
            let dx = dx.host_mut::<T>(OP)?;
            let dgamma = dgamma.host_mut::<T>(OP)?;
            rms_norm_backward_rows::<T, S>(spec, &inputs, dx, dgamma);
            Ok(())
        })
    }
}

fn layer_norm_rows<T: Float, S: Element>(
    spec: RowSpec,
    eps: f64,
    x: &[T],
    (gamma, beta): (&[T], &[T]),
    y: &mut [T],
    mean: &mut [S],
    rstd: &mut [S],
) {
    let len = spec.len;
    if len == 0 {
        // Empty rows: mean 0 and variance 0, by convention.
        mean.fill(S::from_f64(0.0));
        rstd.fill(S::from_f64(1.0 / eps.sqrt()));
        return;
    }
    let n = len as f64;
    y.par_chunks_mut(len)
        .zip(x.par_chunks(len))
        .zip(mean.par_iter_mut().zip(rstd.par_iter_mut()))
        .with_min_len(min_rows(len))
        .for_each(|((y, x), (mean_out, rstd_out))| {
            let mean = x.iter().map(|&v| v.load().f64()).sum::<f64>() / n;
            let var = x
                .iter()
                .map(|&v| {
                    let d = v.load().f64() - mean;
                    d * d
                })
                .sum::<f64>()
                / n;
            let rstd = 1.0 / (var + eps).sqrt();
            *mean_out = S::from_f64(mean);
            *rstd_out = S::from_f64(rstd);
            let (m, r) = (T::C::of(mean), T::C::of(rstd));
            for ((o, &v), (&g, &b)) in y.iter_mut().zip(x).zip(gamma.iter().zip(beta)) {
                *o = T::store((v.load() - m) * r * g.load() + b.load());
            }
        });
}

/// What the layer-norm backward reads.
struct BackwardInputs<'a, T, S> {
    x: &'a [T],
    gamma: &'a [T],
    mean: &'a [S],
    rstd: &'a [S],
    dy: &'a [T],
}

fn layer_norm_backward_rows<T: Float, S: Element>(
    spec: RowSpec,
    inputs: &BackwardInputs<'_, T, S>,
    dx: &mut [T],
    dgamma: &mut [T],
    dbeta: &mut [T],
) {
    let RowSpec { rows, len } = spec;
    if len == 0 {
        return;
    }
    let block = rows.div_ceil(MAX_PARTIALS).max(1);
    // Each block of rows writes its `dx` rows and returns its partial `[dgamma | dbeta]`.
    let partials: Vec<Vec<f64>> = dx
        .par_chunks_mut(block * len)
        .enumerate()
        .map(|(b, dx)| {
            let mut acc = vec![0f64; 2 * len];
            for (r, dx) in dx.chunks_mut(len).enumerate() {
                backward_row(inputs, b * block + r, len, dx, &mut acc);
            }
            acc
        })
        .collect();
    let mut total = vec![0f64; 2 * len];
    for partial in &partials {
        for (t, &p) in total.iter_mut().zip(partial) {
            *t += p;
        }
    }
    let (dg, db) = total.split_at(len);
    for (o, &v) in dgamma.iter_mut().zip(dg) {
        *o = T::store(T::C::of(v));
    }
    for (o, &v) in dbeta.iter_mut().zip(db) {
        *o = T::store(T::C::of(v));
    }
}

/// The backward pass of one row: writes its `dx` and adds its `dy * xhat` and `dy` into
/// `acc` (`[dgamma | dbeta]`, f64).
fn backward_row<T: Float, S: Element>(
    inputs: &BackwardInputs<'_, T, S>,
    row: usize,
    len: usize,
    dx: &mut [T],
    acc: &mut [f64],
) {
    let span = row * len..(row + 1) * len;
    let (x, dy) = (&inputs.x[span.clone()], &inputs.dy[span]);
    let (mean, rstd) = (inputs.mean[row].to_f64(), inputs.rstd[row].to_f64());
    let (dg, db) = acc.split_at_mut(len);
    let (mut sum_g, mut sum_gx) = (0f64, 0f64);
    for j in 0..len {
        let xhat = (x[j].load().f64() - mean) * rstd;
        let d = dy[j].load().f64();
        let g = d * inputs.gamma[j].load().f64();
        sum_g += g;
        sum_gx += g * xhat;
        dg[j] += d * xhat;
        db[j] += d;
    }
    let n = len as f64;
    let (m, r) = (T::C::of(mean), T::C::of(rstd));
    let (mean_g, mean_gx) = (T::C::of(sum_g / n), T::C::of(sum_gx / n));
    for ((o, (&v, &d)), &g) in dx.iter_mut().zip(x.iter().zip(dy)).zip(inputs.gamma) {
        let xhat = (v.load() - m) * r;
        let g = d.load() * g.load();
        *o = T::store(r * (g - mean_g - xhat * mean_gx));
    }
}
