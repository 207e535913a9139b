//! The operands of the row ops (softmax, layer normalization): seen as rows over their last
//! axis.

/// An operand seen as `rows` rows of `len` contiguous elements (normalized over each row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSpec {
    /// Product of every dimension but the last.
    pub rows: usize,
    /// The last dimension.
    pub len: usize,
}
