//! CUDA kernels: dequantization (`quant.cu`).

use super::kernels::{Codes, DequantOperands, DequantSpec, QuantKernels};
use crate::cuda::{Arg, CudaBackend, Family, float_kernel};
use crate::dtype::DType;
use crate::error::{Error, Result};

impl QuantKernels for CudaBackend {
    fn dequantize(&self, spec: &DequantSpec, operands: DequantOperands<'_>) -> Result<()> {
        const OP: &str = "dequantize";
        let DequantOperands {
            codes,
            scales,
            map,
            out,
        } = operands;
        if spec.len == 0 {
            return Ok(());
        }
        let (len, block) = (spec.len, spec.block);
        match spec.codes {
            Codes::Nf4 | Codes::Int8 => {
                let stem = match spec.codes {
                    Codes::Nf4 => "dequantize_nf4",
                    _ => "dequantize_int8",
                };
                let name = float_kernel(stem, out.dtype(), OP)?;
                let threads = if spec.codes == Codes::Nf4 {
                    len.div_ceil(2)
                } else {
                    len
                };
                let args: [Arg; 5] = [
                    codes.into(),
                    scales.into(),
                    out.into(),
                    len.into(),
                    block.into(),
                ];
                self.launch(OP, Family::Quant, &name, self.grid(threads as u64), &args)
            }
            Codes::Dynamic { offset } => {
                let map = map.ok_or_else(|| Error::Argument {
                    op: OP,
                    detail: "dynamic codes without their code book".into(),
                })?;
                if out.dtype() != DType::F32 {
                    return Err(Error::DType {
                        op: OP,
                        expected: "f32 for dynamic codes".into(),
                        got: out.dtype(),
                    });
                }
                let args: [Arg; 7] = [
                    codes.into(),
                    scales.into(),
                    map.into(),
                    out.into(),
                    len.into(),
                    block.into(),
                    f64::from(offset).into(),
                ];
                let grid = self.grid(len as u64);
                self.launch(OP, Family::Quant, "dequantize_dynamic_f32", grid, &args)
            }
        }
    }
}
