//! What a backend runs to read quantized weights back, and the operands it takes.

use crate::buffer::Buffer;
use crate::error::Result;

/// How a quantized array's codes stand for values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Codes {
    /// NF4: two 4-bit level indices a byte, the even value in the high nibble; a value is its
    /// level ([`crate::quant::nf4::LEVELS`]) times its block's scale.
    Nf4,
    /// Int8: one signed code a byte; a value is its code times its block's scale over 127.
    Int8,
    /// bitsandbytes' 8-bit dynamic map: one index a byte into a 256-value code book; a value is
    /// its code times its block's scale (0 for a block of scale 0), plus `offset`. How double
    /// quantization stores NF4's scales.
    Dynamic {
        /// Added to every value.
        offset: f32,
    },
}

/// The geometry of a dequantization: `len` values in blocks of `block`, each block with its
/// scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DequantSpec {
    /// What the codes stand for.
    pub codes: Codes,
    /// Values.
    pub len: usize,
    /// Values per block (even for NF4).
    pub block: usize,
}

/// The operands of [`QuantKernels::dequantize`], every one contiguous.
#[derive(Debug)]
pub struct DequantOperands<'a> {
    /// The codes, u8: `len / 2` rounded up for NF4, `len` otherwise.
    pub codes: &'a Buffer,
    /// Each block's scale, f32: `len / block` rounded up.
    pub scales: &'a Buffer,
    /// The code book of [`Codes::Dynamic`]: 256 f32 values, ascending.
    pub map: Option<&'a Buffer>,
    /// Receives the `len` values, of a float dtype (f32 for [`Codes::Dynamic`]).
    pub out: &'a mut Buffer,
}

/// The kernels of this family that a backend runs; the op layer has checked sizes, dtypes and
/// devices before calling.
pub trait QuantKernels {
    /// Each value from its code and its block's scale, computed in f32 and rounded once into
    /// `out`'s dtype.
    fn dequantize(&self, spec: &DequantSpec, operands: DequantOperands<'_>) -> Result<()>;
}
