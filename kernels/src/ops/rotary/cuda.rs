//! CUDA kernels: rotary embeddings (`rotary.cu`), one thread per pair of features.

use super::kernels::{RotaryKernels, RotaryOperands, RotarySpec, Turn};
use crate::cuda::{Arg, CudaBackend, Family, float_kernel};
use crate::error::Result;

impl RotaryKernels for CudaBackend {
    fn rotary(&self, spec: &RotarySpec, operands: RotaryOperands<'_>) -> Result<()> {
        const OP: &str = "rotary";
        let RotaryOperands {
            x,
            inv_freq,
            starts,
            out,
        } = operands;
        let stem = match spec.turn {
            Turn::Forward => "rotary",
            Turn::Backward => "rotary_backward",
        };
        let name = float_kernel(stem, x.dtype(), OP)?;
        let (rows, half) = (spec.heads * spec.len, spec.head / 2);
        if rows == 0 || half == 0 {
            return Ok(());
        }
        // The starts' address (0 without documents) and the matrices per row of them: taken as
        // they are (a layout built on the host is checked there).
        let (starts, per_row): (Arg, Arg) = match (spec.documents, starts) {
            (Some(_), Some(starts)) => (starts.into(), spec.heads_per_row().into()),
            _ => (0u64.into(), 1usize.into()),
        };
        let args: [Arg; 9] = [
            x.into(),
            inv_freq.into(),
            out.into(),
            rows.into(),
            spec.len.into(),
            half.into(),
            spec.offset.into(),
            starts,
            per_row,
        ];
        let grid = self.grid((rows * half) as u64);
        self.launch(OP, Family::Rotary, &name, grid, &args)
    }
}
