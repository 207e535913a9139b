//! CUDA kernels: dropout, drawing the same mask as the host.

use super::kernels::RandomKernels;
use crate::buffer::Buffer;
use crate::cuda::{CudaBackend, Family, float_kernel};
use crate::error::Result;

impl RandomKernels for CudaBackend {
    fn dropout(&self, x: &Buffer, out: &mut Buffer, p: f64, seed: u64) -> Result<()> {
        let name = float_kernel("dropout", x.dtype(), "dropout")?;
        let n = x.len();
        if n == 0 {
            return Ok(());
        }
        self.launch(
            "dropout",
            Family::Random,
            &name,
            self.grid(n as u64),
            &[x.into(), out.into(), n.into(), p.into(), seed.into()],
        )
    }
}
