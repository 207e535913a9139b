//! CPU kernels: strided gathers into contiguous memory.

use super::LayoutKernels;
use crate::buffer::Buffer;
use crate::cpu::{CpuBackend, par_rows, with_element};
use crate::error::Result;

impl LayoutKernels for CpuBackend {
    fn gather_strided(
        &self,
        x: &Buffer,
        dims: &[usize],
        strides: &[usize],
        out: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "gather_strided";
        let step = strides.last().copied().unwrap_or(0);
        with_element!(x.dtype(), |T| {
            let x = x.host::<T>(OP)?;
            let out = out.host_mut::<T>(OP)?;
            par_rows(out, dims, [strides], |out_row, [at]| {
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
}
