//! CPU kernels: embedding gather and scatter-add, fused cross-entropy, causal masking.

use rayon::prelude::*;

use super::grouping::IdGroups;
use crate::backend::index::{
    CausalMaskSpec, CrossEntropySpec, EmbeddingSpec, IndexKernels, check_range, counted_rows,
};
use crate::buffer::Buffer;
use crate::cpu::{CpuBackend, with_float};
use crate::dtype::{Compute, Element, Float};
use crate::error::Result;

impl IndexKernels for CpuBackend {
    fn embedding(
        &self,
        spec: EmbeddingSpec,
        table: &Buffer,
        ids: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "embedding";
        let ids = ids.host::<u32>(OP)?;
        check_range(OP, "id", ids, spec.vocab, None)?;
        with_float!(table.dtype(), OP, |T| {
            let table = table.host::<T>(OP)?;
            let out = out.host_mut::<T>(OP)?;
            let dim = spec.dim;
            if dim > 0 {
                out.par_chunks_mut(dim).zip(ids).for_each(|(row, &id)| {
                    let start = id as usize * dim;
                    row.copy_from_slice(&table[start..start + dim]);
                });
            }
            Ok(())
        })
    }

    fn embedding_backward(
        &self,
        spec: EmbeddingSpec,
        ids: &Buffer,
        dy: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "embedding_backward";
        let ids = ids.host::<u32>(OP)?;
        check_range(OP, "id", ids, spec.vocab, None)?;
        let groups = IdGroups::new(ids, spec.vocab, OP)?;
        with_float!(dy.dtype(), OP, |T| {
            let dy = dy.host::<T>(OP)?;
            let out = out.host_mut::<T>(OP)?;
            let dim = spec.dim;
            if dim == 0 {
                return Ok(());
            }
            let zero = <T as Float>::C::ZERO;
            // Adds the rows of `dy` at `positions` into `acc`, in order.
            let add_rows = |positions: &[u32], acc: &mut [<T as Float>::C]| {
                for &p in positions {
                    let p = p as usize;
                    for (a, &g) in acc.iter_mut().zip(&dy[p * dim..(p + 1) * dim]) {
                        *a += g.load();
                    }
                }
            };
            let mut partials = vec![zero; groups.piece_count() * dim];
            partials
                .par_chunks_mut(dim)
                .enumerate()
                .for_each(|(k, acc)| add_rows(groups.piece(k), acc));
            out.par_chunks_mut(dim).enumerate().for_each_init(
                || vec![zero; dim],
                |acc, (v, row)| {
                    let (run, pieces) = (groups.run(v), groups.pieces_of(v));
                    if run.is_empty() {
                        row.fill(T::store(zero));
                        return;
                    }
                    acc.fill(zero);
                    if pieces.is_empty() {
                        add_rows(run, acc);
                    } else {
                        for partial in partials[pieces.start * dim..pieces.end * dim].chunks(dim) {
                            for (a, &p) in acc.iter_mut().zip(partial) {
                                *a += p;
                            }
                        }
                    }
                    for (o, &a) in row.iter_mut().zip(acc.iter()) {
                        *o = T::store(a);
                    }
                },
            );
            Ok(())
        })
    }

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
                .par_chunks(spec.classes)
                .zip(targets)
                .map(|(row, &t)| {
                    if Some(t) == spec.ignore {
                        return 0.0;
                    }
                    let (max, sum) = max_and_sum_exp::<T>(row);
                    // (max - x_t) + ln(sum): no cancellation between two large logits' sums.
                    ((max - row[t as usize].load()) + sum.ln()).f64()
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
            out.host_mut::<O>(OP)?.fill(O::from_f64(loss));
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
            out.par_chunks_mut(spec.classes)
                .zip(logits.par_chunks(spec.classes))
                .zip(targets)
                .for_each(|((dx, row), &t)| {
                    if Some(t) == spec.ignore {
                        dx.fill(T::store(<T as Float>::C::ZERO));
                        return;
                    }
                    let (max, sum) = max_and_sum_exp::<T>(row);
                    for (j, (d, &x)) in dx.iter_mut().zip(row).enumerate() {
                        let p = (x.load() - max).exp() / sum;
                        let p = if j == t as usize {
                            p - <T as Float>::C::ONE
                        } else {
                            p
                        };
                        *d = T::store(p * scale);
                    }
                });
            Ok(())
        })
    }

    fn causal_mask(
        &self,
        spec: CausalMaskSpec,
        fill: f64,
        x: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "causal_mask";
        with_float!(x.dtype(), OP, |T| {
            let x = x.host::<T>(OP)?;
            let out = out.host_mut::<T>(OP)?;
            let size = spec.size;
            let fill = T::store(<T as Float>::C::of(fill));
            if size > 0 {
                out.par_chunks_mut(size)
                    .zip(x.par_chunks(size))
                    .enumerate()
                    .for_each(|(r, (o, x))| {
                        let i = r % size;
                        o[..=i].copy_from_slice(&x[..=i]);
                        o[i + 1..].fill(fill);
                    });
            }
            Ok(())
        })
    }
}

/// The largest element of a row and `sum_j exp(row[j] - max)`, in the compute type.
fn max_and_sum_exp<T: Float>(row: &[T]) -> (T::C, T::C) {
    let max = row.iter().fold(T::C::NEG_INFINITY, |m, &x| m.max(x.load()));
    let sum = row
        .iter()
        .fold(T::C::ZERO, |s, &x| s + (x.load() - max).exp());
    (max, sum)
}
