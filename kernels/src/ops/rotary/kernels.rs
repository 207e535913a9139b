//! What a backend runs for rotary position embeddings, and the operands it takes.

use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::Result;

/// Which way a rotary kernel turns each pair of features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// By the angle `position * inv_freq[i]`: the forward pass.
    Forward,
    /// By the negative angle: the backward pass (a rotation's transpose is its inverse).
    Backward,
}

/// The geometry of a rotary embedding: `heads` independent `[len, head]` matrices, the first
/// row of each at position `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotarySpec {
    /// The product of the leading axes: how many `[len, head]` matrices there are.
    pub heads: usize,
    /// Positions per head.
    pub len: usize,
    /// Features per position; even, feature `i < head / 2` paired with `i + head / 2`.
    pub head: usize,
    /// The position of row 0 (the length of a key/value cache before these rows).
    pub offset: usize,
    /// The angle's sign.
    pub turn: Turn,
    /// Packed documents: the rows of the document starts (`[rows, len]`); matrix `m` is in
    /// row `m / (heads / rows)`, and its row `t` at position `t - starts[row][t]` (`offset` is
    /// then 0). The operands then hold the starts.
    pub documents: Option<usize>,
}

impl RotarySpec {
    /// Matrices per row of the document starts (1 without documents).
    pub fn heads_per_row(&self) -> usize {
        self.heads / self.documents.unwrap_or(self.heads).max(1)
    }
}

/// The operands of [`RotaryKernels::rotary`], every one contiguous and row-major.
#[derive(Debug)]
pub struct RotaryOperands<'a> {
    /// The input, `[heads, len, head]`.
    pub x: &'a Buffer,
    /// The frequencies, `[head / 2]` of [`freq_dtype`] of `x`'s dtype.
    pub inv_freq: &'a Buffer,
    /// The document starts, `[rows, len]` U32, where the spec has documents.
    pub starts: Option<&'a Buffer>,
    /// Receives the rotated input, `x`'s shape and dtype.
    pub out: &'a mut Buffer,
}

/// The kernels of this family that a backend runs; the op layer has checked shapes, dtypes and
/// devices before calling.
pub trait RotaryKernels {
    /// Rotates each pair `(x[i], x[i + head / 2])` of every row `t` by the angle
    /// `a = (offset + t) * inv_freq[i]` (`(t - starts[row][t]) * inv_freq[i]` with documents) (its negative for [`Turn::Backward`]), the angle and
    /// its cosine and sine computed in the compute type (f32, f64 for f64):
    /// `out[i] = x[i] cos a - x[i + head / 2] sin a`,
    /// `out[i + head / 2] = x[i + head / 2] cos a + x[i] sin a`.
    fn rotary(&self, spec: &RotarySpec, operands: RotaryOperands<'_>) -> Result<()>;
}

/// The dtype of the frequencies for inputs of `dtype`: F64 for F64, F32 otherwise.
pub fn freq_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}
