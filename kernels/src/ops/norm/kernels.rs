//! What a backend runs for layer normalization and RMS normalization over the last axis, forward
//! and backward, and how their statistics and parameter gradients are kept.

use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::rows::spec::RowSpec;

/// The operands of [`NormKernels::layer_norm`], every one contiguous and row-major.
#[derive(Debug)]
pub struct LayerNormOperands<'a> {
    /// The input, `[rows, len]`.
    pub x: &'a Buffer,
    /// The scale, `[len]` of `x`'s dtype.
    pub gamma: &'a Buffer,
    /// The shift, `[len]` of `x`'s dtype.
    pub beta: &'a Buffer,
    /// Receives the output, `x`'s shape and dtype.
    pub y: &'a mut Buffer,
    /// Receives each row's mean, `[rows]` of the stats dtype ([`stats_dtype`]).
    pub mean: &'a mut Buffer,
    /// Receives each row's `1 / sqrt(var + eps)`, shaped and typed as `mean`.
    pub rstd: &'a mut Buffer,
}

/// The operands of [`NormKernels::layer_norm_backward`], every one contiguous and row-major.
#[derive(Debug)]
pub struct LayerNormBackwardOperands<'a> {
    /// The forward pass's input, `[rows, len]`.
    pub x: &'a Buffer,
    /// The forward pass's scale, `[len]` of `x`'s dtype.
    pub gamma: &'a Buffer,
    /// The saved mean of each row, `[rows]` of the stats dtype ([`stats_dtype`]).
    pub mean: &'a Buffer,
    /// The saved `1 / sqrt(var + eps)` of each row, shaped and typed as `mean`.
    pub rstd: &'a Buffer,
    /// The upstream gradient, `x`'s shape and dtype.
    pub dy: &'a Buffer,
    /// Receives the input's gradient, `x`'s shape and dtype.
    pub dx: &'a mut Buffer,
    /// Receives the scale's gradient, `[len]`.
    pub dgamma: &'a mut Buffer,
    /// Receives the shift's gradient, `[len]`.
    pub dbeta: &'a mut Buffer,
}

/// The operands of [`NormKernels::rms_norm`], every one contiguous and row-major.
#[derive(Debug)]
pub struct RmsNormOperands<'a> {
    /// The input, `[rows, len]`.
    pub x: &'a Buffer,
    /// The scale, `[len]` of `x`'s dtype.
    pub gamma: &'a Buffer,
    /// Receives the output, `x`'s shape and dtype.
    pub y: &'a mut Buffer,
    /// Receives each row's `1 / sqrt(mean(x^2) + eps)`, `[rows]` of the stats dtype
    /// ([`stats_dtype`]).
    pub rstd: &'a mut Buffer,
}

/// The operands of [`NormKernels::rms_norm_backward`], every one contiguous and row-major.
#[derive(Debug)]
pub struct RmsNormBackwardOperands<'a> {
    /// The forward pass's input, `[rows, len]`.
    pub x: &'a Buffer,
    /// The forward pass's scale, `[len]` of `x`'s dtype.
    pub gamma: &'a Buffer,
    /// The saved `1 / sqrt(mean(x^2) + eps)` of each row, `[rows]` of the stats dtype.
    pub rstd: &'a Buffer,
    /// The upstream gradient, `x`'s shape and dtype.
    pub dy: &'a Buffer,
    /// Receives the input's gradient, `x`'s shape and dtype.
    pub dx: &'a mut Buffer,
    /// Receives the scale's gradient, `[len]`.
    pub dgamma: &'a mut Buffer,
}

/// The kernels of this family that a backend runs. Every buffer is contiguous and row-major;
/// the op layer has checked lengths, dtypes and devices before calling.
pub trait NormKernels {
    /// Layer normalization of each row of `x` (`[rows, len]`):
    /// `y = (x - mean) * rstd * gamma + beta` with `rstd = 1 / sqrt(var + eps)` (biased
    /// variance); `mean` and `rstd` receive each row's statistics.
    fn layer_norm(&self, spec: RowSpec, eps: f64, operands: LayerNormOperands<'_>) -> Result<()>;

    /// The gradients of [`NormKernels::layer_norm`] from its input `x`, `gamma`, the saved
    /// `mean` and `rstd`, and the upstream `dy`: `dx`, and `dgamma`, `dbeta`, summed over every
    /// row in a fixed order (deterministic).
    fn layer_norm_backward(
        &self,
        spec: RowSpec,
        operands: LayerNormBackwardOperands<'_>,
    ) -> Result<()>;

    /// RMS normalization of each row of `x` (`[rows, len]`): `y = x * rstd * gamma` with
    /// `rstd = 1 / sqrt(mean(x^2) + eps)`, which `rstd` receives. Half types round `x * rstd`
    /// to their dtype before the product with `gamma`, as Hugging Face's `LlamaRMSNorm` does.
    fn rms_norm(&self, spec: RowSpec, eps: f64, operands: RmsNormOperands<'_>) -> Result<()>;

    /// The gradients of [`NormKernels::rms_norm`] from its input `x`, `gamma`, the saved `rstd`
    /// and the upstream `dy`: `dx`, and `dgamma` summed over every row in a fixed order
    /// (deterministic).
    fn rms_norm_backward(&self, spec: RowSpec, operands: RmsNormBackwardOperands<'_>)
    -> Result<()>;
}

/// The dtype of layer normalization statistics for inputs of `dtype`: F64 for F64, F32
/// otherwise.
pub fn stats_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// How many partial sums of the parameter gradients the CPU backend makes at most: the rows
/// are cut into this many blocks (fewer when there are fewer rows), whatever the number of
/// threads, and the blocks' sums are added in block order, so the result is deterministic.
pub(crate) const MAX_PARTIALS: usize = 64;

/// How the CUDA backend sums the gradients of `params` parameters of `len` elements (two for
/// layer norm, one for RMS norm): per row slice (at most 128, fewer for rows so long that the
/// partial sums would pass 16 MiB), then the slices' partial sums in order. Returns the slices
/// and the f64 elements of the partial sums' workspace, which a meta device planning for CUDA
/// takes too.
pub(crate) fn parameter_partials(rows: usize, len: usize, params: usize) -> (usize, usize) {
    const SLICES: usize = 128;
    const MOST_BYTES: usize = 16 << 20;
    let per_slice = (params * len * size_of::<f64>()).max(1);
    let slices = rows.clamp(1, SLICES).min((MOST_BYTES / per_slice).max(1));
    (slices, params * slices * len)
}
