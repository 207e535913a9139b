//! CPU kernels: strided gathers into contiguous memory, and concatenation.

use rayon::prelude::*;

use super::kernels::{LayoutKernels, Strided};
use crate::buffer::Buffer;
use crate::cpu::{CpuBackend, par_rows, with_element};
use crate::error::Result;

impl LayoutKernels for CpuBackend {
    fn gather_strided(&self, x: &Buffer, view: Strided<'_>, out: &mut Buffer) -> Result<()> {
        const OP: &str = "gather_strided";
        let step = view.strides.last().copied().unwrap_or(0);
        with_element!(x.dtype(), |T| {
            let x = &x.host::<T>(OP)?[view.offset.min(x.len())..];
            let out = out.host_mut::<T>(OP)?;
            par_rows(out, view.dims, [view.strides], |out_row, [at]| {
                if step == 1 {
                    out_row.copy_from_slice(&x[at..at + out_row.len()]);
                } else {
                    for (j, o) in out_row.iter_mut().enumerate() {
                        *o = x[at + j * step];
                    }
                }
            });
            Ok(())
        })
    }

    fn concat(
        &self,
        pieces: &[&Buffer],
        widths: &[usize],
        outer: usize,
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "concat";
        let total: usize = widths.iter().sum();
        if total == 0 || outer == 0 {
            return Ok(());
        }
        with_element!(out.dtype(), |T| {
            let sources = pieces
                .iter()
                .map(|p| p.host::<T>(OP))
                .collect::<Result<Vec<_>>>()?;
            out.host_mut::<T>(OP)?
                .par_chunks_mut(total)
                .take(outer)
                .enumerate()
                .for_each(|(row, out_row)| {
                    let mut at = 0;
                    for (source, &width) in sources.iter().zip(widths) {
                        out_row[at..at + width]
                            .copy_from_slice(&source[row * width..(row + 1) * width]);
                        at += width;
                    }
                });
            Ok(())
        })
    }
}
