//! What a backend runs for softmax and log-softmax over the last axis (scaled and causally
//! masked as attention needs), forward and backward.

use crate::buffer::Buffer;
use crate::error::Result;
use crate::ops::rows::spec::RowSpec;

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
pub trait SoftmaxKernels {
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

    /// The gradient of [`SoftmaxKernels::softmax`] with respect to its input, from its output `y`
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
}
