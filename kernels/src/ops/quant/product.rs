//! A few rows against a weight stored in NF4, multiplied on its codes as stored where the
//! device has the kernel (a CPU): a linear layer of QLoRA's base while generating.

use super::kernels::{Nf4ProductOperands, Nf4ProductSpec};
use super::stored::{QuantFormat, Quantized};
use crate::array::Array;
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::gemm::few_rows::MOST_ROWS;
use crate::shape::Shape;

impl Quantized {
    /// `x @ self^T` for `x` `[..., k]` of a float dtype against this `[n, k]` weight, in `x`'s
    /// dtype, read from the codes as stored: a few rows (a generation step's) against an NF4
    /// weight whose rows are whole blocks, on a device with the kernel. Bit for bit what
    /// multiplying by [`dequantize`](Self::dequantize)`(x.dtype())` gives; `None` where it
    /// does not run (dequantize and multiply instead).
    pub fn few_rows_product(&self, x: &Array) -> Result<Option<Array>> {
        const OP: &str = "nf4_few_rows";
        let device = x.device();
        let (&[n, k], Some(&x_k)) = (self.dims(), x.shape().dims().last()) else {
            return Ok(None);
        };
        let m = x.numel().checked_div(k).unwrap_or(0);
        let block = QuantFormat::BLOCK;
        let runs = self.format() == QuantFormat::Nf4
            && device.backend().has_nf4_few_rows()
            && device.same(self.device())
            && x_k == k
            && k > 0
            && k.is_multiple_of(block)
            && (1..=MOST_ROWS).contains(&m)
            && matches!(x.dtype(), DType::F32 | DType::BF16 | DType::F16);
        if !runs {
            return Ok(None);
        }
        let scales = self.block_scales()?;
        let mut dims = x.shape().dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = n;
        }
        let mut out = Array::uninit(device, Shape::new(&dims), x.dtype(), OP)?;
        let spec = Nf4ProductSpec { m, n, k, block };
        let operands = Nf4ProductOperands {
            x: x.buffer(),
            codes: self.codes().buffer(),
            scales: scales.buffer(),
            out: out.buffer_mut(OP)?,
        };
        device.backend().nf4_few_rows(&spec, operands)?;
        Ok(Some(out))
    }
}
