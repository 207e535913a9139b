//! What a backend runs for layer normalization over the last axis, forward and backward, and how
//! its statistics and parameter gradients are kept.

use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::rows::spec::RowSpec;

/// The kernels of this family that a backend runs. Every buffer is contiguous and row-major;
/// the op layer has checked lengths, dtypes and devices before calling.
pub trait NormKernels {
    /// Layer normalization of each row of `x` (`[rows, len]`):
    /// `y = (x - mean) * rstd * gamma + beta` with `rstd = 1 / sqrt(var + eps)` (biased
    /// variance). `gamma` and `beta` are `[len]` of `x`'s dtype; `mean` and `rstd` (`[rows]`,
    /// the stats dtype, see [`stats_dtype`]) receive each row's statistics.
    #[allow(clippy::too_many_arguments)]
    fn layer_norm(
        &self,
        spec: RowSpec,
        eps: f64,
        x: &Buffer,
        gamma: &Buffer,
        beta: &Buffer,
        y: &mut Buffer,
        mean: &mut Buffer,
        rstd: &mut Buffer,
    ) -> Result<()>;

    /// The gradients of [`NormKernels::layer_norm`] from its input `x`, `gamma`, the saved
    /// `mean` and `rstd`, and the upstream `dy` (`x`'s shape): `dx` (`x`'s shape), and
    /// `dgamma`, `dbeta` (`[len]`), summed over every row in a fixed order (deterministic).
    #[allow(clippy::too_many_arguments)]
    fn layer_norm_backward(
        &self,
        spec: RowSpec,
        x: &Buffer,
        gamma: &Buffer,
        mean: &Buffer,
        rstd: &Buffer,
        dy: &Buffer,
        dx: &mut Buffer,
        dgamma: &mut Buffer,
        dbeta: &mut Buffer,
    ) -> Result<()>;
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

/// How the CUDA backend sums layer-norm parameter gradients: per row slice (at most 128, fewer
/// for rows so long that the partial sums would pass 16 MiB), then the slices' partial sums in
/// order. Returns the slices and the f64 elements of the partial sums' workspace, which a meta
/// device planning for CUDA takes too.
pub(crate) fn parameter_partials(rows: usize, len: usize) -> (usize, usize) {
    const SLICES: usize = 128;
    const MOST_BYTES: usize = 16 << 20;
    let per_slice = (2 * len * size_of::<f64>()).max(1);
    let slices = rows.clamp(1, SLICES).min((MOST_BYTES / per_slice).max(1));
    (slices, 2 * slices * len)
}
