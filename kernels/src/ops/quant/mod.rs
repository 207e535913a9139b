//! Weights stored quantized on a device, read back inside the products that use them: QLoRA's
//! frozen base. [`Quantized`] holds a matrix as [`crate::quantize`] quantizes it on the host (NF4
//! with its scales quantized again, or block-wise int8), uploaded as codes and scales alone;
//! [`Quantized::dequantize`] gives its values in a float dtype, block by block from the codes,
//! for one product at a time, and [`Quantized::gather_rows`] the rows of a table (a token
//! embedding) that ids name, dequantized as they are read.
//!
//! [`dequantize`] is the op beneath: each value from its code and its block's scale, computed in
//! f32 as the host's `dequantize` does (the same operations, no fused multiply-add), rounded
//! once to the output's dtype, so that every backend gives the host's values to the bit.

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod few_rows;
pub(crate) mod kernels;
mod meta;
mod product;
mod stored;

pub use kernels::{
    Codes, DequantOperands, DequantSpec, GatherOperands, GatherSpec, Nf4ProductOperands,
    Nf4ProductSpec, QuantKernels,
};
pub use stored::{ArrivingQuantized, QuantFormat, Quantized};

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Shape;

/// The values of `shape` stored as `codes` (u8) with one f32 scale per block of `block` values
/// in `scales` (and, for [`Codes::Dynamic`], the 256 f32 values of `map`), as an array of
/// `dtype` (f32 for dynamic codes).
pub fn dequantize(
    codes: &Array,
    scales: &Array,
    map: Option<&Array>,
    spec: Codes,
    block: usize,
    shape: impl Into<Shape>,
    dtype: DType,
) -> Result<Array> {
    const OP: &str = "dequantize";
    let shape = shape.into();
    let len = shape.numel();
    let code_len = match spec {
        Codes::Nf4 => len.div_ceil(2),
        Codes::Int8 | Codes::Dynamic { .. } => len,
    };
    let bad = |detail: String| Err(Error::Argument { op: OP, detail });
    if block == 0 || (spec == Codes::Nf4 && !block.is_multiple_of(2)) {
        return bad(format!("blocks of {block} values"));
    }
    for (name, array, dtype, want) in [
        ("codes", codes, DType::U8, code_len),
        ("scales", scales, DType::F32, len.div_ceil(block)),
    ] {
        if array.dtype() != dtype || array.numel() != want {
            return bad(format!(
                "{name} of {} {}: {shape} in blocks of {block} needs {want} {dtype}",
                array.numel(),
                array.dtype()
            ));
        }
        codes.device().check_same(array.device(), OP)?;
    }
    let dynamic = matches!(spec, Codes::Dynamic { .. });
    match map {
        Some(map) if dynamic && map.dtype() == DType::F32 && map.numel() == 256 => {
            codes.device().check_same(map.device(), OP)?;
        }
        None if !dynamic => {}
        _ => return bad("dynamic codes, and they alone, take a code book of 256 f32".into()),
    }
    if !dtype.is_float() || (dynamic && dtype != DType::F32) {
        return Err(Error::DType {
            op: OP,
            expected: "a float dtype (f32 for dynamic codes)".into(),
            got: dtype,
        });
    }
    let device = codes.device();
    let mut out = Array::uninit(device, shape, dtype, OP)?;
    let operands = DequantOperands {
        codes: codes.buffer(),
        scales: scales.buffer(),
        map: map.map(Array::buffer),
        out: out.buffer_mut(OP)?,
    };
    let spec = DequantSpec {
        codes: spec,
        len,
        block,
    };
    device.backend().dequantize(&spec, operands)?;
    Ok(out)
}
