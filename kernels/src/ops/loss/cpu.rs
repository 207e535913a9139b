//! CPU kernels: the fused cross-entropy, forward and backward.

use rayon::prelude::*;

use super::kernels::{CrossEntropySpec, LossKernels, counted_rows};
use super::rows::{row_grad_best_isa, row_loss_best_isa, slice_grad, slice_parts};
use crate::buffer::Buffer;
use crate::cpu::{CpuBackend, with_float};
use crate::dtype::{Compute, Element, Float};
use crate::error::Result;
use crate::ops::elementwise::isa::in_best_isa;
use crate::ops::index::kernels::check_range;

impl LossKernels for CpuBackend {
    fn cross_entropy(
        &self,
        spec: CrossEntropySpec,
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "cross_entropy";
        let targets = targets.host::<u32>(OP)?;
        check_range(OP, "target", targets, spec.classes, spec.ignore)?;
        let losses: Vec<f64> = with_float!(logits.dtype(), OP, |T| {
            let logits = logits.host::<T>(OP)?;
            Ok(logits
                .par_chunks(spec.width)
                .zip(targets)
                .map(|(row, &t)| {
                    if Some(t) == spec.ignore {
                        return 0.0;
                    }
                    row_loss_best_isa(&row[..spec.classes], t as usize)
                })
                .collect())
        })?;
        // Summed in order, so the result does not depend on the thread count.
        let counted = counted_rows(targets, spec.ignore);
        let loss = if counted == 0 {
            0.0
        } else {
            losses.iter().sum::<f64>() / counted as f64
        };
        with_float!(out.dtype(), OP, |O| {
            out.host_mut::<O>(OP)?.fill(<O as Element>::from_f64(loss));
            Ok(())
        })
    }

    fn cross_entropy_backward(
        &self,
        spec: CrossEntropySpec,
        dloss: &Buffer,
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "cross_entropy_backward";
        let targets = targets.host::<u32>(OP)?;
        check_range(OP, "target", targets, spec.classes, spec.ignore)?;
        let dloss = with_float!(dloss.dtype(), OP, |L| Ok(dloss.host::<L>(OP)?[0].to_f64()))?;
        let counted = counted_rows(targets, spec.ignore).max(1);
        with_float!(logits.dtype(), OP, |T| {
            let logits = logits.host::<T>(OP)?;
            let out = out.host_mut::<T>(OP)?;
            let scale = <T as Float>::C::of(dloss / counted as f64);
            out.par_chunks_mut(spec.width)
                .zip(logits.par_chunks(spec.width))
                .zip(targets)
                .for_each(|((dx, row), &t)| {
                    let (dx, padding) = dx.split_at_mut(spec.classes);
                    padding.fill(T::store(<T as Float>::C::ZERO));
                    if Some(t) == spec.ignore {
                        dx.fill(T::store(<T as Float>::C::ZERO));
                        return;
                    }
                    row_grad_best_isa(dx, &row[..spec.classes], t as usize, scale);
                });
            Ok(())
        })
    }

    fn sliced_cross_entropy_parts(
        &self,
        spec: CrossEntropySpec,
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "sliced_cross_entropy_parts";
        let targets = targets.host::<u32>(OP)?;
        let parts: Vec<(f64, f64)> = with_float!(logits.dtype(), OP, |T| {
            let logits = logits.host::<T>(OP)?;
            Ok(in_best_isa(
                #[inline(always)]
                || {
                    (logits.par_chunks(spec.classes.max(1)))
                        .zip(targets)
                        .map(|(row, &t)| {
                            let (lse, picked) = slice_parts(row, t as usize);
                            (lse.f64(), picked.f64())
                        })
                        .collect()
                },
            ))
        })?;
        with_float!(out.dtype(), OP, |O| {
            let out = out.host_mut::<O>(OP)?;
            let (lse, picked) = out.split_at_mut(spec.rows);
            for ((l, p), (a, b)) in lse.iter_mut().zip(picked).zip(parts) {
                (*l, *p) = (O::from_f64(a), O::from_f64(b));
            }
            Ok(())
        })
    }

    fn sliced_cross_entropy_backward(
        &self,
        spec: CrossEntropySpec,
        (lse, scale): (&Buffer, &Buffer),
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "sliced_cross_entropy_backward";
        let targets = targets.host::<u32>(OP)?;
        let per_row = |b: &Buffer| -> Result<Vec<f64>> {
            with_float!(b.dtype(), OP, |L| Ok(b
                .host::<L>(OP)?
                .iter()
                .map(|x| x.to_f64())
                .collect()))
        };
        let (lse, scale) = (per_row(lse)?, per_row(scale)?);
        if spec.classes == 0 {
            return Ok(());
        }
        with_float!(logits.dtype(), OP, |T| {
            let logits = logits.host::<T>(OP)?;
            let out = out.host_mut::<T>(OP)?;
            let of = <T as Float>::C::of;
            in_best_isa(
                #[inline(always)]
                || {
                    (out.par_chunks_mut(spec.classes))
                        .zip(logits.par_chunks(spec.classes))
                        .zip(targets)
                        .enumerate()
                        .for_each(|(i, ((dx, row), &t))| {
                            slice_grad(dx, row, t as usize, of(lse[i]), of(scale[i]));
                        });
                },
            );
            Ok(())
        })
    }
}
