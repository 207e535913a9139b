//! The differentiable ops, as methods on [`Tensor`], one file per family. Each runs its kernels,
//! then, if a tape records and tracks an input, records a backward rule that keeps only what
//! the rule needs: a sum keeps shapes, a product keeps its operands, an exponential its output.

mod attention;
mod cast;
mod index;
mod layout;
mod linear_loss;
mod loss;
mod matmul;
mod norm;
mod pointwise;
mod quantized;
mod random;
mod reduce;
mod rotary;
mod selective;
mod sharded;
mod sharded_embedding;
mod sharded_head;

pub use selective::LinearWeight;
pub use sharded::{chunk_of, every_rank};
mod softmax;
mod swiglu;
mod transfer;

use headroom_kernels::ops::elementwise::{self as ew, BinaryOp};
use headroom_kernels::ops::reduce::sum_to;
use headroom_kernels::{Array, DType, Shape};

use crate::error::Result;
use crate::tape::{Backward, InputGrads};
use crate::tensor::Tensor;

/// `x` in `dtype`: itself (shared, not copied) when it already is.
fn in_dtype(x: &Array, dtype: DType) -> Result<Array> {
    Ok(if x.dtype() == dtype {
        x.clone()
    } else {
        x.cast(dtype)?
    })
}

/// A backward rule for an op with one output.
fn rule(f: impl FnOnce(&Array, &[bool]) -> Result<InputGrads> + Send + 'static) -> Backward {
    Backward::One(Box::new(move |g: Array, needs: &[bool]| f(&g, needs)))
}

/// A backward rule for an elementwise op whose input gradient is `op(saved, g)`: computed in
/// the upstream gradient's own buffer when nothing else holds it (no second array at the
/// moment gradients are largest), in a new one otherwise.
fn rule_in_place(op: BinaryOp, saved: Array) -> Backward {
    Backward::One(Box::new(move |mut g: Array, _: &[bool]| {
        let dx = if g.is_shared() {
            ew::binary(op, &saved, &g)?
        } else {
            ew::binary_into(op, &saved, &mut g)?;
            g
        };
        Ok(vec![Some(dx)])
    }))
}

/// A backward rule for an op with several outputs.
fn rule_many(
    f: impl FnOnce(&[Option<Array>], &[bool]) -> Result<InputGrads> + Send + 'static,
) -> Backward {
    Backward::Many(Box::new(f))
}

/// `f()` when `needed`, else `None`.
fn when(needed: bool, f: impl FnOnce() -> Result<Array>) -> Result<Option<Array>> {
    needed.then(f).transpose()
}

/// `g` summed down to `shape` (the gradient of an operand broadcast to `g`'s shape); `g` itself
/// (shared, not copied) when the shapes agree.
fn reduce_to(g: &Array, shape: &Shape) -> Result<Array> {
    if g.shape() == shape {
        Ok(g.clone())
    } else {
        Ok(sum_to(g, shape.clone())?)
    }
}

/// The dtype two float operands meet in: the wider, and f32 between the two half types
/// (PyTorch's promotion).
fn promoted(a: DType, b: DType) -> DType {
    match (a, b) {
        _ if a == b => a,
        (DType::F64, _) | (_, DType::F64) => DType::F64,
        _ => DType::F32,
    }
}

/// `a` and `b` cast (recorded) to the dtype they meet in.
fn promote(a: &Tensor, b: &Tensor) -> Result<(Tensor, Tensor)> {
    let dtype = promoted(a.dtype(), b.dtype());
    Ok((a.cast(dtype)?, b.cast(dtype)?))
}
