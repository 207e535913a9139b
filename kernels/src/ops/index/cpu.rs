//! CPU kernels: embedding gather and scatter-add, causal masking.

use std::ops::Range;

use rayon::prelude::*;

use super::grouping::IdGroups;
use super::kernels::{CausalMaskSpec, EmbeddingSpec, IndexKernels, check_range, positions_of};
use crate::buffer::Buffer;
use crate::cpu::{CpuBackend, with_float};
use crate::dtype::{Compute, Float};
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
        rows: Range<usize>,
        ids: &Buffer,
        dy: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "embedding_backward";
        let ids = ids.host::<u32>(OP)?;
        check_range(OP, "id", ids, spec.vocab, None)?;
        let groups = IdGroups::new(ids, rows, OP)?;
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

    fn document_positions(
        &self,
        shape: (usize, usize),
        starts: &Buffer,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "document_positions";
        let positions = positions_of(starts.host::<u32>(OP)?, shape, OP)?;
        out.host_mut::<u32>(OP)?.copy_from_slice(&positions);
        Ok(())
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
