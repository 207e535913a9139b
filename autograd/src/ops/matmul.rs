//! Matrix products, batched, with transpose flags.

use headroom_kernels::ops::gemm;
use headroom_kernels::{Array, Shape};

use super::{reduce_to, rule, when};
use crate::error::Result;
use crate::kept::Kept;
use crate::recording::begin;
use crate::saved::{Saved, saves};
use crate::tape::Recording;
use crate::tensor::Tensor;

impl Tensor {
    /// `self @ other` over the last two axes, batched over the leading ones (equal, or absent
    /// on one side: a matrix shared across the batch). Under autocast both run in its dtype.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        self.matmul_t(other, false, false)
    }

    /// A linear layer with PyTorch's layout: `self @ weight^T + bias`, for `weight` of shape
    /// `[out, in]` and `bias` of `[out]`. Under autocast the bias joins the product's dtype
    /// too, so that the output (and whatever the next layer saves) stays in the half type.
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let Some(bias) = bias else {
            return self.matmul_t(weight, false, true);
        };
        let (x, w, b) = (self.for_matmul()?, weight.for_matmul()?, bias.for_matmul()?);
        // One GEMM that starts from the bias (torch.addmm): no second pass, no second array.
        let y = Tensor::output(gemm::matmul_bias(
            x.array(),
            w.array(),
            b.array(),
            false,
            true,
        )?);
        if let Some(rec) = begin(&[&x, &w, &b]) {
            let saved = Operands::keep(&rec, &x, &w);
            let account = saved.account();
            let sb = b.shape().clone();
            let backward = rule(move |g, needs| {
                let [dx, dw] = saved.grads(g, needs, false, true)?;
                Ok(vec![dx, dw, when(needs[2], || reduce_to(g, &sb))?])
            });
            rec.finish("linear", &[&y], account, backward);
        }
        Ok(y)
    }

    /// `op(self) @ op(other)`, where `op` transposes the last two axes when its flag is set:
    /// `x.matmul_t(w, false, true)` is `x @ w^T`, a linear layer with PyTorch's weight layout.
    /// Keeps each operand only if the other needs a gradient.
    pub fn matmul_t(&self, other: &Tensor, trans_a: bool, trans_b: bool) -> Result<Tensor> {
        let (a, b) = (self.for_matmul()?, other.for_matmul()?);
        let y = Tensor::output(gemm::matmul(a.array(), b.array(), trans_a, trans_b)?);
        if let Some(rec) = begin(&[&a, &b]) {
            let saved = Operands::keep(&rec, &a, &b);
            let account = saved.account();
            let backward =
                rule(move |g, needs| Ok(Vec::from(saved.grads(g, needs, trans_a, trans_b)?)));
            rec.finish("matmul", &[&y], account, backward);
        }
        Ok(y)
    }
}

/// What a product `op(a) op(b)` keeps for its backward rule: each operand only if the other
/// needs a gradient, and both shapes.
struct Operands {
    a: Option<Kept>,
    b: Option<Kept>,
    a_shape: Shape,
    b_shape: Shape,
}

impl Operands {
    fn keep(rec: &Recording, a: &Tensor, b: &Tensor) -> Self {
        Self {
            a: rec.tracks(1).then(|| Kept::of(a)),
            b: rec.tracks(0).then(|| Kept::of(b)),
            a_shape: a.shape().clone(),
            b_shape: b.shape().clone(),
        }
    }

    /// The account of what it holds (an operand formed again holds nothing).
    fn account(&self) -> Saved {
        let held = self.a.iter().chain(&self.b).filter_map(Kept::held);
        saves(&held.collect::<Vec<_>>())
    }

    /// The gradients of `a` and `b` from `g`, as `needs` asks. `b`'s first, then `a`'s: the
    /// saved `a` (often an activation as large as `a`'s gradient) is released before `a`'s
    /// gradient is allocated.
    fn grads(self, g: &Array, needs: &[bool], ta: bool, tb: bool) -> Result<[Option<Array>; 2]> {
        let db = match (needs[1], self.a) {
            (true, Some(a)) => Some(grad_b(&a.array()?, &self.b_shape, g, ta, tb)?),
            _ => None,
        };
        let da = match (needs[0], self.b) {
            (true, Some(b)) => Some(grad_a(&self.a_shape, &b.array()?, g, ta, tb)?),
            _ => None,
        };
        Ok([da, db])
    }
}

/// The gradient of `a` (of shape `a_shape`) in `c = op(a) op(b)`, from `g = dc`:
/// `g op(b)^T`, or its transpose when `a` enters transposed; summed over the batch when `a` is
/// shared across it.
pub(super) fn grad_a(a_shape: &Shape, b: &Array, g: &Array, ta: bool, tb: bool) -> Result<Array> {
    let full = if ta {
        gemm::matmul(b, g, tb, true)?
    } else {
        gemm::matmul(g, b, false, !tb)?
    };
    reduce_to(&full, a_shape)
}

/// The gradient of `b` (of shape `b_shape`) in `c = op(a) op(b)`, from `g = dc`:
/// `op(a)^T g`, or its transpose when `b` enters transposed. A matrix shared across a batch of
/// untransposed `a` takes the batch as extra rows of one product (no per-batch partial sums).
pub(super) fn grad_b(a: &Array, b_shape: &Shape, g: &Array, ta: bool, tb: bool) -> Result<Array> {
    let batched = a.shape().rank() > 2;
    if b_shape.rank() == 2 && batched && !ta {
        let (k, n) = (
            a.shape().dims()[a.shape().rank() - 1],
            g.shape().dims()[g.shape().rank() - 1],
        );
        let rows = a.numel() / k.max(1);
        let (a, g) = (a.reshape([rows, k])?, g.reshape([rows, n])?);
        return Ok(if tb {
            gemm::matmul(&g, &a, true, false)?
        } else {
            gemm::matmul(&a, &g, true, false)?
        });
    }
    let full = if tb {
        gemm::matmul(g, a, true, ta)?
    } else {
        gemm::matmul(a, g, !ta, false)?
    };
    reduce_to(&full, b_shape)
}
