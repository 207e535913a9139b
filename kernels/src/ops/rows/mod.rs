//! What the row ops (softmax, layer normalization) share: they see an operand as rows over its
//! last axis ([`RowSpec`]); their checks live here, and the shapes their CUDA kernels are built
//! in (`cuda.rs`). `lanes` holds the vectorizing reductions of a row the CPU's cross-entropy
//! and attention share.

#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod lanes;
pub(crate) mod spec;

pub use spec::RowSpec;

use crate::array::Array;
use crate::error::{Error, Result};
use crate::shape::Shape;

/// The rows of `x` (float, rank >= 1), or an error naming `op`.
pub(super) fn rows_of(x: &Array, op: &'static str) -> Result<RowSpec> {
    x.check_float(op)?;
    let dims = x.shape().dims();
    let Some((&len, rest)) = dims.split_last() else {
        return Err(Error::Shape {
            op,
            detail: format!("the input must have rank >= 1, got shape {}", x.shape()),
        });
    };
    Ok(RowSpec {
        rows: rest.iter().product(),
        len,
    })
}

/// Fails unless `other` (called `what`) has `shape`, and `x`'s dtype and device.
pub(super) fn check_operand(
    x: &Array,
    other: &Array,
    what: &str,
    shape: &Shape,
    op: &'static str,
) -> Result<()> {
    x.check_peer(other, op)?;
    if other.shape() != shape {
        return Err(Error::Shape {
            op,
            detail: format!(
                "{what} has shape {}, the input {} needs {shape}",
                other.shape(),
                x.shape()
            ),
        });
    }
    Ok(())
}
