//! CUDA kernels: dequantization (`quant.cu`).

use super::kernels::{
    Codes, DequantOperands, DequantSpec, GatherOperands, GatherSpec, QuantKernels, code_book,
    nf4_tables,
};
use crate::cuda::{Arg, CudaBackend, Family, float_kernel};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::index::kernels::check_range;

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
                let map = code_book(map, OP)?;
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

    fn gather_rows(&self, spec: &GatherSpec, operands: GatherOperands<'_>) -> Result<()> {
        const OP: &str = "gather_rows";
        let GatherOperands {
            codes,
            scales,
            scale_codes,
            map,
            ids,
            out,
        } = operands;
        let host = self.read_u32(OP, ids)?;
        check_range(OP, "id", &host, spec.rows, None)?;
        if out.is_empty() {
            return Ok(());
        }
        let grid = self.grid(out.len() as u64);
        let (count, width, block) = (spec.count, spec.width, spec.block);
        match spec.codes {
            Codes::Nf4 => {
                let (scale_codes, map) = nf4_tables(scale_codes, map, OP)?;
                let name = float_kernel("gather_nf4", out.dtype(), OP)?;
                let args: [Arg; 11] = [
                    codes.into(),
                    scale_codes.into(),
                    scales.into(),
                    map.into(),
                    ids.into(),
                    out.into(),
                    count.into(),
                    width.into(),
                    block.into(),
                    spec.scale_block.into(),
                    f64::from(spec.offset).into(),
                ];
                self.launch(OP, Family::Quant, &name, grid, &args)
            }
            _ => {
                let name = float_kernel("gather_int8", out.dtype(), OP)?;
                let args: [Arg; 7] = [
                    codes.into(),
                    scales.into(),
                    ids.into(),
                    out.into(),
                    count.into(),
                    width.into(),
                    block.into(),
                ];
                self.launch(OP, Family::Quant, &name, grid, &args)
            }
        }
    }
}
