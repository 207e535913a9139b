//! CUDA kernels: strided gathers and concatenation (`layout.cu`), by element size.

use crate::backend::layout::{LayoutKernels, Strided};
use crate::buffer::Buffer;
use crate::cuda::{CudaBackend, Family, Walk};
use crate::error::Result;

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
        let name = format!("gather_{size}");
        let args = [start.into(), out.into(), n.into(), walk.into()];
        self.launch(OP, Family::Layout, &name, self.grid(n as u64), &args)
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
        let name = format!("concat_piece_{}", out.dtype().size());
        let mut at = 0;
        for (piece, &width) in pieces.iter().zip(widths) {
            if width > 0 && outer > 0 {
                let args = [
                    (*piece).into(),
                    (&*out).into(),
                    outer.into(),
                    width.into(),
                    total.into(),
                    at.into(),
                ];
                let grid = self.grid((outer * width) as u64);
                self.launch(OP, Family::Layout, &name, grid, &args)?;
            }
            at += width;
        }
        Ok(())
    }
}
