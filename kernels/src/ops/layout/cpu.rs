//! CPU kernels: transposes and permutations into contiguous memory.

use super::LayoutKernels;
use crate::buffer::Buffer;
use crate::cpu::{CpuBackend, par_rows, with_element};
use crate::error::Result;
use crate::shape::Shape;

impl LayoutKernels for CpuBackend {
    fn permute(&self, x: &Buffer, shape: &Shape, axes: &[usize], out: &mut Buffer) -> Result<()> {
        let in_strides = shape.strides();
        // Output dimension d walks input axis axes[d].
        let dims: Vec<usize> = axes.iter().map(|&a| shape.dims()[a]).collect();
        let strides: Vec<usize> = axes.iter().map(|&a| in_strides[a]).collect();
        let step = strides.last().copied().unwrap_or(0);
        with_element!(x.dtype(), |T| {
            let x = x.host::<T>("permute")?;
            let out = out.host_mut::<T>("permute")?;
            par_rows(out, &dims, [&strides], |out_row, [at]| {
                for (j, o) in out_row.iter_mut().enumerate() {
                    *o = x[at + j * step];
                }
            });
            Ok(())
        })
    }
}
