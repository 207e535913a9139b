//! What a backend runs to read quantized weights back, and the operands it takes.

use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::ops::gemm::kernels::GemmSpec;

/// How a quantized array's codes stand for values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Codes {
    /// NF4: two 4-bit level indices a byte, the even value in the high nibble; a value is its
    /// level ([`crate::quantize::nf4::LEVELS`]) times its block's scale.
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

/// The geometry of a few rows against a weight stored in NF4: `out [m, n] = x [m, k] @ w^T`,
/// `w` `[n, k]` with every row whole blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Nf4ProductSpec {
    /// Rows of `x` and of the output (a few: the tokens of one generation step).
    pub m: usize,
    /// The weight's rows, the output's columns.
    pub n: usize,
    /// The weight's columns, a whole number of blocks.
    pub k: usize,
    /// Values per block.
    pub block: usize,
}

impl Nf4ProductSpec {
    /// The same product as a dense one: `x` against the weight used transposed.
    pub(crate) fn as_product(&self) -> GemmSpec {
        GemmSpec {
            batch: 1,
            m: self.m,
            n: self.n,
            k: self.k,
            trans_a: false,
            trans_b: true,
            a_batch_stride: 0,
            b_batch_stride: 0,
            accumulate: false,
        }
    }
}

/// The operands of [`QuantKernels::nf4_few_rows`], every one contiguous.
#[derive(Debug)]
pub struct Nf4ProductOperands<'a> {
    /// `x`, `m * k` values of the product's float dtype.
    pub x: &'a Buffer,
    /// The weight's NF4 codes, u8, `n * k / 2`.
    pub codes: &'a Buffer,
    /// Each block's scale, f32 (double quantization already undone).
    pub scales: &'a Buffer,
    /// Receives the `m * n` products, of `x`'s dtype.
    pub out: &'a mut Buffer,
}

/// The kernels of this family that a backend runs; the op layer has checked sizes, dtypes and
/// devices before calling.
pub trait QuantKernels {
    /// Each value from its code and its block's scale, computed in f32 and rounded once into
    /// `out`'s dtype.
    fn dequantize(&self, spec: &DequantSpec, operands: DequantOperands<'_>) -> Result<()>;

    /// The rows of a quantized table that the ids name, each value as
    /// [`dequantize`](Self::dequantize) gives it (an NF4 block's scale from its code as
    /// [`Codes::Dynamic`] gives it). An id out of range is an [`Error::Argument`](crate::Error).
    fn gather_rows(&self, spec: &GatherSpec, operands: GatherOperands<'_>) -> Result<()>;

    /// Whether [`nf4_few_rows`](Self::nf4_few_rows) runs here; elsewhere the op layer
    /// dequantizes the weight and multiplies.
    fn has_nf4_few_rows(&self) -> bool {
        false
    }

    /// A few rows against a weight stored in NF4, its codes read as stored: what the product of
    /// `x` and the weight dequantized into `x`'s dtype gives, to the bit.
    fn nf4_few_rows(&self, spec: &Nf4ProductSpec, _: Nf4ProductOperands<'_>) -> Result<()> {
        Err(Error::Argument {
            op: "nf4_few_rows",
            detail: format!("no kernel on this backend for {spec:?}"),
        })
    }
}

/// The geometry of a row gather from a quantized `[rows, width]` table (a token embedding):
/// `count` ids, each naming a row whose `width` values come back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GatherSpec {
    /// [`Codes::Nf4`] (its scales double-quantized) or [`Codes::Int8`] (f32 scales).
    pub codes: Codes,
    /// Ids.
    pub count: usize,
    /// The table's rows: every id must be below.
    pub rows: usize,
    /// Values a row.
    pub width: usize,
    /// Values per block.
    pub block: usize,
    /// NF4: blocks per block of scales, and the scales' offset.
    pub scale_block: usize,
    /// NF4: added to every dequantized scale.
    pub offset: f32,
}

/// The operands of [`QuantKernels::gather_rows`], every one contiguous.
#[derive(Debug)]
pub struct GatherOperands<'a> {
    /// The table's codes, u8, as [`DequantOperands::codes`].
    pub codes: &'a Buffer,
    /// f32: each block's scale (int8), or each block of scales' scale (NF4).
    pub scales: &'a Buffer,
    /// NF4: each block's scale as a dynamic-map code, u8.
    pub scale_codes: Option<&'a Buffer>,
    /// NF4: the dynamic map, 256 f32.
    pub map: Option<&'a Buffer>,
    /// The ids, u32.
    pub ids: &'a Buffer,
    /// Receives `count * width` values of a float dtype.
    pub out: &'a mut Buffer,
}

/// The code book of dynamic codes, or an error naming `op` without it.
pub(crate) fn code_book<'a>(map: Option<&'a Buffer>, op: &'static str) -> Result<&'a Buffer> {
    map.ok_or_else(|| Error::Argument {
        op,
        detail: "dynamic codes without their code book".into(),
    })
}

/// NF4's scale codes and the code book they index, or an error naming `op` without them.
pub(crate) fn nf4_tables<'a>(
    scale_codes: Option<&'a Buffer>,
    map: Option<&'a Buffer>,
    op: &'static str,
) -> Result<(&'a Buffer, &'a Buffer)> {
    scale_codes.zip(map).ok_or_else(|| Error::Argument {
        op,
        detail: "NF4 rows without their scales' codes and code book".into(),
    })
}
