//! What a backend runs for softmax, log-softmax and layer normalization over the last axis.

use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::Result;

/// An operand seen as `rows` rows of `len` contiguous elements (normalized over each row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSpec {
    /// Product of every dimension but the last.
    pub rows: usize,
    /// The last dimension.
    pub len: usize,
}

/// Which of the two softmax functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoftmaxKind {
    /// `y = exp(x - max) / sum(exp(x - max))`.
    Softmax,
    /// `y = x - max - ln(sum(exp(x - max)))`.
    LogSoftmax,
}

impl SoftmaxKind {
    /// The forward op's name, for errors.
    pub fn name(self) -> &'static str {
        match self {
            SoftmaxKind::Softmax => "softmax",
            SoftmaxKind::LogSoftmax => "log_softmax",
        }
    }

    /// The backward op's name, for errors.
    pub fn backward_name(self) -> &'static str {
        match self {
            SoftmaxKind::Softmax => "softmax_backward",
            SoftmaxKind::LogSoftmax => "log_softmax_backward",
        }
    }
}

/// A softmax as the kernels run it: which one, a factor its input is scaled by first, and
/// whether rows are masked causally (row `i` of each square matrix sees only columns `0..=i`,
/// as attention over the past does; masked outputs are 0 for softmax, -infinity for
/// log-softmax, and their gradients 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SoftmaxSpec {
    /// Softmax or log-softmax.
    pub kind: SoftmaxKind,
    /// The input's factor (1 for a plain softmax).
    pub scale: f64,
    /// Mask above the diagonal (rows must be as long as the matrices are tall).
    pub causal: bool,
}

impl SoftmaxSpec {
    /// A plain softmax or log-softmax.
    pub fn plain(kind: SoftmaxKind) -> Self {
        Self {
            kind,
            scale: 1.0,
            causal: false,
        }
    }
}

/// The kernels of this family that a backend runs. Every buffer is contiguous and row-major;
/// the op layer has checked lengths, dtypes and devices before calling.
pub trait NormKernels {
    /// Writes softmax or log-softmax of each row of `x` (`[rows, len]`, float), scaled and
    /// masked as `softmax` says, into `y` (same dtype and length), subtracting the row maximum
    /// first so that large inputs do not overflow.
    fn softmax(
        &self,
        softmax: SoftmaxSpec,
        spec: RowSpec,
        x: &Buffer,
        y: &mut Buffer,
    ) -> Result<()>;

    /// The gradient of [`NormKernels::softmax`] with respect to its input, from its output `y`
    /// and the upstream gradient `dy` (both `[rows, len]`, same float dtype), into `dx`:
    /// `scale * y * (dy - sum(dy * y))` for softmax, `scale * (dy - exp(y) * sum(dy))` for
    /// log-softmax, sums over each row's unmasked columns, 0 where masked.
    fn softmax_backward(
        &self,
        softmax: SoftmaxSpec,
        spec: RowSpec,
        y: &Buffer,
        dy: &Buffer,
        dx: &mut Buffer,
    ) -> Result<()>;

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
