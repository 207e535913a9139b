//! What a backend runs for the fused cross-entropy loss against class targets, forward and
//! backward, and the dtype of the loss.

use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::Result;

/// The geometry of a cross-entropy: `rows` rows of `classes` logits, `width` elements apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrossEntropySpec {
    /// Number of rows (examples); at least 1.
    pub rows: usize,
    /// Number of classes per row (valid targets are `0..classes`).
    pub classes: usize,
    /// Elements from one row's start to the next (at least `classes`): the columns past
    /// `classes` are padding, read by neither pass and zero in the gradient.
    pub width: usize,
    /// Rows whose target is this value count for nothing: no loss, no gradient, and not in the
    /// mean's denominator (PyTorch's `ignore_index`).
    pub ignore: Option<u32>,
    /// The rows that count, when the caller has checked the targets on the host; a backend
    /// whose targets live on a device then reads nothing back (a target out of range still
    /// reads no memory outside its row, and gives NaN).
    pub counted: Option<usize>,
}

/// The kernels of this family that a backend runs.
pub trait LossKernels {
    /// Writes into the one element of `out` (f32, or f64 for f64 logits) the mean over rows of
    /// `logsumexp(logits[i]) - logits[i, targets[i]]` (each row's first `classes` columns). Fails with
    /// [`Error::Argument`](crate::Error::Argument) when a target is `>= classes`.
    fn cross_entropy(
        &self,
        spec: CrossEntropySpec,
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()>;

    /// `out[i, j] = (softmax(logits[i])[j] - (j == targets[i])) * dloss / counted`, in the
    /// logits' dtype, where `dloss` is a one-element buffer of the loss' dtype and `counted` the
    /// rows not ignored; ignored rows and the padding get zeros. Fails with
    /// [`Error::Argument`](crate::Error::Argument) when a target is `>= classes` and not the
    /// ignored one.
    fn cross_entropy_backward(
        &self,
        spec: CrossEntropySpec,
        dloss: &Buffer,
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()>;

    /// For a cross-entropy whose vocabulary is sliced over ranks, these logits being one
    /// slice's (`classes` columns a row, no padding): writes each row's log-sum-exp over the
    /// slice into `out[i]`, and its target's logit into `out[rows + i]` where the target lies
    /// in the slice (`targets[i] < classes`), 0 where it lies in another. `out` is of the
    /// loss' dtype.
    fn sliced_cross_entropy_parts(
        &self,
        spec: CrossEntropySpec,
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()>;

    /// `out[i, j] = (exp(logits[i, j] - lse[i]) - (j == targets[i])) * scale[i]`, in the
    /// logits' dtype: the gradient of a slice of a cross-entropy whose softmax spans the whole
    /// vocabulary, `lse` each row's log-sum-exp over all of it and `scale` each row's weight
    /// (`per_row`, both of the loss' dtype). A target outside the slice subtracts nothing.
    fn sliced_cross_entropy_backward(
        &self,
        spec: CrossEntropySpec,
        per_row: (&Buffer, &Buffer),
        logits: &Buffer,
        targets: &Buffer,
        out: &mut Buffer,
    ) -> Result<()>;
}

/// The dtype of a cross-entropy of logits of `dtype`: f64 for f64, f32 otherwise.
pub fn loss_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// Rows whose target is not the ignored one.
pub(crate) fn counted_rows(targets: &[u32], ignore: Option<u32>) -> usize {
    targets.iter().filter(|&&t| Some(t) != ignore).count()
}
