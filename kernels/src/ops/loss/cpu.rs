//! CPU kernels: the fused cross-entropy, forward and backward.

use rayon::prelude::*;

use super::kernels::{CrossEntropySpec, LossKernels, counted_rows};
use super::rows::{row_grad_best_isa, row_loss_best_isa};
use crate::buffer::Buffer;
use crate::cpu::{CpuBackend, with_float};
use crate::dtype::{Compute, Element, Float};
use crate::error::Result;
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
}
