//! Selective recomputation (Korthikanti et al. 2022): a product whose operand is a cheap
//! elementwise result keeps that result's own input instead, and computes the result again in
//! the backward pass. [`Tensor::layer_norm_linear`] and [`Tensor::rms_norm_linear`] keep the
//! norm's input and statistics, not its output; [`Tensor::gelu_linear`] keeps the GELU's
//! input, not its output; [`Tensor::swiglu_linear`] keeps the gate and the up projection, not
//! their product; [`Tensor::merged_heads_linear`] keeps attention's output, not the copy of it
//! merged for the output projection. [`Tensor::rms_norm_linears`] feeds one norm to several
//! products. Each gives what the ops apart give, bit for bit, and keeps one array the size of
//! its operand less. [`Tensor::rms_norm_swiglu`], a Llama block's whole MLP, goes one step
//! further: it keeps the gate alone of the MLP's two products, and runs the up projection
//! again.

mod gelu;
mod layer_norm;
mod merged_heads;
mod rms_norm;
mod rms_norm_swiglu;
mod swiglu;

use headroom_kernels::ops::elementwise as ew;
use headroom_kernels::ops::gemm;
use headroom_kernels::{Array, DType, Shape};

use super::matmul::{grad_a, grad_b};
use super::{reduce_to, when};
use crate::error::Result;
use crate::tape::InputGrads;
use crate::tensor::Tensor;

/// `x` in `dtype`: itself when it already is.
fn in_dtype(x: &Array, dtype: DType) -> Result<Array> {
    Ok(if x.dtype() == dtype {
        x.clone()
    } else {
        x.cast(dtype)?
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

    /// `operand @ w^T (+ b)`, with the operand cast to the weight's dtype and let go of before
    /// the product's output is wrapped.
    fn forward(&self, operand: Array) -> Result<Tensor> {
        let x = in_dtype(&operand, self.w.dtype())?;
        drop(operand);
        let y = match &self.b {
            Some(b) => gemm::matmul_bias(&x, self.w.array(), b.array(), false, true)?,
            None => gemm::matmul(&x, self.w.array(), false, true)?,
        };
        drop(x);
        Ok(Tensor::output(y))
    }

    /// The op's own tracked `inputs`, then the weight and the bias: what its rule answers for.
    fn inputs<'a>(&'a self, inputs: &[&'a Tensor]) -> Vec<&'a Tensor> {
        let mut all = inputs.to_vec();
        all.push(&self.w);
        all.extend(self.b.as_ref());
        all
    }

    /// What the backward rule keeps of the layer: the weight as the product took it, and the
    /// bias's shape.
    fn saved(&self) -> LinearSaved {
        LinearSaved {
            w: self.w.array().clone(),
            bias: self.b.as_ref().map(|b| b.shape().clone()),
        }
    }
}

/// What a selective op's backward rule keeps of its linear layer.
struct LinearSaved {
    /// The weight, in the product's dtype.
    w: Array,
    /// The bias's shape, which its gradient is summed down to; `None` without a bias.
    bias: Option<Shape>,
}

impl LinearSaved {
    /// The gradient of the product's operand `x` (recomputed, in the dtype the cheap op gave
    /// it; cast here to the weight's and let go of as soon as the weight's gradient is made),
    /// in `x`'s dtype, and the gradients of the weight and the bias (the last entries of
    /// `needs`) as the rule returns them, from the output's gradient `g`.
    fn grads(&self, x: Array, g: &Array, needs: &[bool]) -> Result<(Array, InputGrads)> {
        let w = &self.w;
        let weight_at = needs.len() - 1 - usize::from(self.bias.is_some());
        let (x_dtype, x_shape) = (x.dtype(), x.shape().clone());
        let operand = in_dtype(&x, w.dtype())?;
        drop(x);
        let dw = when(needs[weight_at], || {
            grad_b(&operand, w.shape(), g, false, true)
        })?;
        drop(operand);
        let mut grads = vec![dw];
        if let Some(shape) = &self.bias {
            grads.push(when(needs[weight_at + 1], || reduce_to(g, shape))?);
        }
        let dx = grad_a(&x_shape, w, g, false, true)?;
        Ok((in_dtype(&dx, x_dtype)?, grads))
    }
}

/// The gradients of an operand that several layers took (recomputed as `operand`): the
/// operand's (the sum of each layer's, in the operand's dtype; `None` when no output got a
/// gradient) and each layer's weight and bias gradients, in order, from the outputs'
/// gradients `outputs`. `needs` lists the op's `own` inputs first, then each layer's weight
/// and bias. The operand is let go of with the last layer's weight gradient, before that
/// layer's operand gradient is made.
fn shared_operand_grads(
    layers: &[LinearSaved],
    operand: Array,
    outputs: &[Option<Array>],
    needs: &[bool],
    own: usize,
) -> Result<(Option<Array>, InputGrads)> {
    let mut grads = Vec::new();
    let mut doperand: Option<Array> = None;
    let mut end = own;
    let mut operands = vec![operand; layers.len()].into_iter();
    for (layer, g) in layers.iter().zip(outputs) {
        let count = 1 + usize::from(layer.bias.is_some());
        end += count;
        let operand = operands.next();
        let (Some(g), Some(operand)) = (g, operand) else {
            grads.resize(grads.len() + count, None);
            continue;
        };
        let (d, layer_grads) = layer.grads(operand, g, &needs[..end])?;
        doperand = Some(match doperand {
            None => d,
            Some(sum) => ew::binary(ew::BinaryOp::Add, &sum, &d)?,
        });
        grads.extend(layer_grads);
    }
    Ok((doperand, grads))
}

/// The layers of `weights`, and the op's own `inputs` followed by each layer's weight and
/// bias: what a rule over several layers answers for.
fn layers_of(weights: &[(&Tensor, Option<&Tensor>)]) -> Result<Vec<Linear>> {
    weights.iter().map(|&(w, b)| Linear::new(w, b)).collect()
}

/// The op's own `inputs`, then every layer's weight and bias.
fn inputs_of<'a>(own: &[&'a Tensor], layers: &'a [Linear]) -> Vec<&'a Tensor> {
    let mut all = own.to_vec();
    for layer in layers {
        all = layer.inputs(&all);
    }
    all
}
