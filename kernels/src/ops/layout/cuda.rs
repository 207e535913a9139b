//! CUDA kernels: strided gathers and concatenation (`layout.cu`), by element size, or 16 bytes
//! at a time where the innermost run of the walk (a slice of columns, a permutation that keeps
//! the last axis, a wide piece of a concatenation), every other stride and the start all fall
//! on 16 bytes.

use super::kernels::{LayoutKernels, Strided};
use crate::buffer::Buffer;
use crate::cuda::{CudaBackend, Family, Walk};
use crate::error::Result;

/// Bytes of the wide unit.
const WIDE: usize = 16;

/// Elements of `size` bytes per unit: `WIDE / size` where the contiguous run of `run` elements,
/// each of `steps` (in elements) and the byte address `start` are all multiples of 16 bytes,
/// else 1.
fn per_unit(size: usize, run: u64, steps: &[u64], start: u64) -> usize {
    let wide = WIDE as u64;
    let fits = |elements: u64| run > 0 && (elements * size as u64).is_multiple_of(wide);
    if fits(run) && steps.iter().all(|&s| fits(s)) && start.is_multiple_of(wide) {
        WIDE / size
    } else {
        1
    }
}

impl LayoutKernels for CudaBackend {
    fn gather_strided(&self, x: &Buffer, view: Strided<'_>, out: &mut Buffer) -> Result<()> {
        const OP: &str = "gather_strided";
        let n = out.len();
        if n == 0 {
            return Ok(());
        }
        let size = x.dtype().size();
        let start = x.addr() + (view.offset.min(x.len()) * size) as u64;
        let [walk] = Walk::merged(view.dims, [view.strides], OP)?;
        let run = walk.contiguous_run();
        let strides = walk.strides();
        let others = &strides[..strides.len().saturating_sub(1)];
        let per = per_unit(size, run, others, start);
        let name = format!("gather_{}", size * per);
        let walk = walk.in_units(per as u64);
        let units = n / per;
        let args = [start.into(), out.into(), units.into(), walk.into()];
        self.launch(OP, Family::Layout, &name, self.grid(units as u64), &args)
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
        let size = out.dtype().size();
        let mut at = 0;
        for (piece, &width) in pieces.iter().zip(widths) {
            if width > 0 && outer > 0 {
                let steps = [total as u64, at as u64];
                let per = per_unit(size, width as u64, &steps, out.addr());
                let name = format!("concat_piece_{}", size * per);
                let args = [
                    (*piece).into(),
                    (&*out).into(),
                    outer.into(),
                    (width / per).into(),
                    (total / per).into(),
                    (at / per).into(),
                ];
                let grid = self.grid((outer * width / per) as u64);
                self.launch(OP, Family::Layout, &name, grid, &args)?;
            }
            at += width;
        }
        Ok(())
    }
}
