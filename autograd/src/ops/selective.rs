//! Selective recomputation (Korthikanti et al. 2022): a product whose operand is a cheap
//! elementwise result keeps that result's own input instead, and computes the result again in
//! the backward pass. [`Tensor::layer_norm_linear`] keeps the norm's input and statistics, not
//! its output; [`Tensor::gelu_linear`] keeps the GELU's input, not its output. Each gives what
//! the two ops apart give, bit for bit, and keeps one array the size of its operand less.

use headroom_kernels::ops::elementwise::{self as ew, BinaryOp};
use headroom_kernels::ops::gemm;
use headroom_kernels::ops::norm;
use headroom_kernels::{Array, DType, Shape};

use super::matmul::{grad_a, grad_b};
use super::{promoted, reduce_to, rule, when};
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

/// `x` in `dtype`: itself when it already is.
fn in_dtype(x: &Array, dtype: DType) -> Result<Array> {
    Ok(if x.dtype() == dtype {
        x.clone()
    } else {
        x.cast(dtype)?
    })
}

/// `x @ w^T (+ b)`, the product of a linear layer.
fn product(x: &Array, w: &Array, b: Option<&Array>) -> Result<Array> {
    Ok(match b {
        Some(b) => gemm::matmul_bias(x, w, b, false, true)?,
        None => gemm::matmul(x, w, false, true)?,
    })
}

/// A linear layer's operands as the product takes them (cast under autocast), and the list of
/// tracked inputs its rule answers for: the op's own inputs, then the weight and the bias.
struct Linear {
    w: Tensor,
    b: Option<Tensor>,
}

impl Linear {
    fn new(weight: &Tensor, bias: Option<&Tensor>) -> Result<Self> {
        Ok(Self {
            w: weight.for_matmul()?,
            b: bias.map(Tensor::for_matmul).transpose()?,
        })
    }

    /// The gradients of the weight and the bias, and of the product's operand `x` (recomputed,
    /// in the product's dtype), from the output's gradient `g`, as `needs` asks (weight, bias).
    fn grads(
        w: &Array,
        bias: Option<&Shape>,
        x: Array,
        g: &Array,
        (dw, db): (bool, bool),
    ) -> Result<(Array, Option<Array>, Option<Array>)> {
        let dw = when(dw, || grad_b(&x, w.shape(), g, false, true))?;
        let x_shape = x.shape().clone();
        drop(x);
        let db = match bias {
            Some(shape) if db => Some(reduce_to(g, shape)?),
            _ => None,
        };
        Ok((grad_a(&x_shape, w, g, false, true)?, dw, db))
    }
}

impl Tensor {
    /// `layer_norm(self, gamma, beta, eps) @ weight^T + bias` (a pre-norm sublayer's first
    /// product), keeping the norm's input and per-row statistics but not its output, which the
    /// backward pass computes again.
    pub fn layer_norm_linear(
        &self,
        (gamma, beta, eps): (&Tensor, &Tensor, f64),
        weight: &Tensor,
        bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        let x = self.for_f32_op()?;
        let dtype = promoted(promoted(x.dtype(), gamma.dtype()), beta.dtype());
        let (x, gamma, beta) = (x.cast(dtype)?, gamma.cast(dtype)?, beta.cast(dtype)?);
        let linear = Linear::new(weight, bias)?;
        let normed = norm::layer_norm(x.array(), gamma.array(), beta.array(), eps)?;
        let (mean, rstd) = (normed.mean, normed.rstd);
        let operand = in_dtype(&normed.y, linear.w.dtype())?;
        drop(normed.y);
        let y = product(
            &operand,
            linear.w.array(),
            linear.b.as_ref().map(Tensor::array),
        )?;
        drop(operand);
        let y = Tensor::output(y);
        let mut inputs = vec![&x, &gamma, &beta, &linear.w];
        inputs.extend(linear.b.as_ref());
        if let Some(rec) = begin(&inputs) {
            let (xs, gs, bs) = (
                x.array().clone(),
                gamma.array().clone(),
                beta.array().clone(),
            );
            let ws = linear.w.array().clone();
            let bias_shape = linear.b.as_ref().map(|b| b.shape().clone());
            let saved = saves(&[&xs, &gs, &bs, &ws, &mean, &rstd]);
            let backward = rule(move |g, needs| {
                let normed = norm::layer_norm(&xs, &gs, &bs, eps)?.y;
                let operand = in_dtype(&normed, ws.dtype())?;
                drop(normed);
                let asks = (needs[3], needs.get(4) == Some(&true));
                let (doperand, dw, db) = Linear::grads(&ws, bias_shape.as_ref(), operand, g, asks)?;
                let dnormed = in_dtype(&doperand, xs.dtype())?;
                drop(doperand);
                let n = norm::layer_norm_backward(&xs, &gs, &mean, &rstd, &dnormed)?;
                let mut grads = vec![
                    needs[0].then_some(n.dx),
                    needs[1].then_some(n.dgamma),
                    needs[2].then_some(n.dbeta),
                    dw,
                ];
                if bias_shape.is_some() {
                    grads.push(db);
                }
                Ok(grads)
            });
            rec.finish("layer_norm_linear", &[&y], saved, backward);
        }
        Ok(y)
    }

    /// `gelu(self) @ weight^T + bias` (an MLP's second product), keeping the GELU's input but
    /// not its output, which the backward pass computes again.
    pub fn gelu_linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let linear = Linear::new(weight, bias)?;
        let activated = ew::gelu(self.array())?;
        let operand = in_dtype(&activated, linear.w.dtype())?;
        drop(activated);
        let y = product(
            &operand,
            linear.w.array(),
            linear.b.as_ref().map(Tensor::array),
        )?;
        drop(operand);
        let y = Tensor::output(y);
        let mut inputs = vec![self, &linear.w];
        inputs.extend(linear.b.as_ref());
        if let Some(rec) = begin(&inputs) {
            let (hs, ws) = (self.array().clone(), linear.w.array().clone());
            let bias_shape = linear.b.as_ref().map(|b| b.shape().clone());
            let saved = saves(&[&hs, &ws]);
            let backward = rule(move |g, needs| {
                let operand = in_dtype(&ew::gelu(&hs)?, ws.dtype())?;
                let asks = (needs[1], needs.get(2) == Some(&true));
                let (doperand, dw, db) = Linear::grads(&ws, bias_shape.as_ref(), operand, g, asks)?;
                let dactivated = in_dtype(&doperand, hs.dtype())?;
                drop(doperand);
                let dh = when(needs[0], || {
                    ew::binary(BinaryOp::GeluBackward, &hs, &dactivated).map_err(Into::into)
                })?;
                let mut grads = vec![dh, dw];
                if bias_shape.is_some() {
                    grads.push(db);
                }
                Ok(grads)
            });
            rec.finish("gelu_linear", &[&y], saved, backward);
        }
        Ok(y)
    }
}
