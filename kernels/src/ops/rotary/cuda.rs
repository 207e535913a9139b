//! CUDA kernels: rotary embeddings (`rotary.cu`), one thread per pair of features.

use super::kernels::{RotaryKernels, RotaryOperands, RotarySpec, Turn};
use crate::cuda::{Arg, CudaBackend, Family, float_kernel};
use crate::error::Result;

impl RotaryKernels for CudaBackend {
    fn rotary(&self, spec: &RotarySpec, operands: RotaryOperands<'_>) -> Result<()> {
        const OP: &str = "rotary";
        let RotaryOperands { x, inv_freq, out } = operands;
        let stem = match spec.turn {
            Turn::Forward => "rotary",
            Turn::Backward => "rotary_backward",
        };
        let name = float_kernel(stem, x.dtype(), OP)?;
        let (rows, half) = (spec.heads * spec.len, spec.head / 2);
        if rows == 0 || half == 0 {
            return Ok(());
        }
        let args: [Arg; 7] = [
            x.into(),
            inv_freq.into(),
            out.into(),
            rows.into(),
            spec.len.into(),
            half.into(),
            spec.offset.into(),
        ];
        let grid = self.grid((rows * half) as u64);
        self.launch(OP, Family::Rotary, &name, grid, &args)
    }
}
