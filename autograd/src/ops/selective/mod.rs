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
use headroom_kernels::ops::quant::Quantized;
use headroom_kernels::{Array, DType, Shape};

use super::matmul::{grad_a, grad_b};
use super::quantized::product_dtype;
use super::{in_dtype, reduce_to, when};
use crate::error::Result;
use crate::kept::Kept;
use crate::tape::InputGrads;
use crate::tensor::Tensor;

/// A linear layer's weight as a selective op takes it: a tensor, or codes stored quantized
/// (QLoRA's frozen base: no gradient, dequantized for each product and let go of after it).
#[derive(Debug, Clone, Copy)]
pub enum LinearWeight<'a> {
    /// The weight itself.
    Dense(&'a Tensor),
    /// Codes and scales, dequantized into the product's dtype.
    Quantized(&'a Quantized),
}

impl<'a> From<&'a Tensor> for LinearWeight<'a> {
    fn from(weight: &'a Tensor) -> Self {
        LinearWeight::Dense(weight)
    }
}

impl<'a> From<&'a Quantized> for LinearWeight<'a> {
    fn from(weight: &'a Quantized) -> Self {
        LinearWeight::Quantized(weight)
    }
}

/// A weight as the product takes it: cast under autocast, or stored quantized.
#[derive(Clone)]
enum Weight {
    Dense(Tensor),
    Quantized(Box<Quantized>),
}

/// A linear layer's operands as the product takes them (cast under autocast), and the list of
/// tracked inputs its rule answers for: the op's own inputs, then the weight (unless it is
/// stored quantized) and the bias.
struct Linear {
    w: Weight,
    b: Option<Tensor>,
}

impl Linear {
    fn new(weight: LinearWeight<'_>, bias: Option<&Tensor>) -> Result<Self> {
        Ok(Self {
            w: match weight {
                LinearWeight::Dense(w) => Weight::Dense(w.for_matmul()?),
                LinearWeight::Quantized(q) => Weight::Quantized(Box::new(q.clone())),
            },
            b: bias.map(Tensor::for_matmul).transpose()?,
        })
    }

    /// The dtype the product runs in.
    fn dtype(&self) -> DType {
        match &self.w {
            Weight::Dense(w) => w.dtype(),
            Weight::Quantized(q) => product_dtype(q),
        }
    }

    /// `operand @ w^T (+ b)`, with the operand cast to the product's dtype and let go of
    /// before the product's output is wrapped (a quantized weight's values too).
    fn forward(&self, operand: Array) -> Result<Tensor> {
        let x = in_dtype(&operand, self.dtype())?;
        drop(operand);
        let w = match &self.w {
            Weight::Dense(w) => w.array().clone(),
            Weight::Quantized(q) => q.dequantize(self.dtype())?,
        };
        let y = match &self.b {
            Some(b) => gemm::matmul_bias(&x, &w, b.array(), false, true)?,
            None => gemm::matmul(&x, &w, false, true)?,
        };
        drop((x, w));
        Ok(Tensor::output(y))
    }

    /// The op's own tracked `inputs`, then the weight (a tensor) and the bias: what its rule
    /// answers for.
    fn inputs<'a>(&'a self, inputs: &[&'a Tensor]) -> Vec<&'a Tensor> {
        let mut all = inputs.to_vec();
        if let Weight::Dense(w) = &self.w {
            all.push(w);
        }
        all.extend(self.b.as_ref());
        all
    }

    /// What the backward rule keeps of the layer: the weight as the product took it, and the
    /// bias's shape.
    fn saved(&self) -> LinearSaved {
        LinearSaved {
            w: match &self.w {
                Weight::Dense(w) => SavedWeight::Dense(Kept::of(w)),
                Weight::Quantized(q) => SavedWeight::Quantized(q.clone(), self.dtype()),
            },
            bias: self.b.as_ref().map(|b| b.shape().clone()),
        }
    }
}

/// A weight as a selective op's backward rule keeps it.
enum SavedWeight {
    /// In the product's dtype, held or formed again.
    Dense(Kept),
    /// The codes, and the dtype the product dequantized them to.
    Quantized(Box<Quantized>, DType),
}

/// What a selective op's backward rule keeps of its linear layer.
struct LinearSaved {
    w: SavedWeight,
    /// The bias's shape, which its gradient is summed down to; `None` without a bias.
    bias: Option<Shape>,
}

impl LinearSaved {
    /// The dtype of the product.
    fn dtype(&self) -> DType {
        match &self.w {
            SavedWeight::Dense(w) => w.dtype(),
            SavedWeight::Quantized(_, dtype) => *dtype,
        }
    }

    /// The arrays it keeps, for the tape's account.
    fn arrays(&self) -> Vec<&Array> {
        match &self.w {
            SavedWeight::Dense(w) => w.held().into_iter().collect(),
            SavedWeight::Quantized(q, _) => q.arrays(),
        }
    }

    /// The weight's values in the product's dtype (dequantized again when stored quantized).
    fn weight(&self) -> Result<Array> {
        match &self.w {
            SavedWeight::Dense(w) => w.array(),
            SavedWeight::Quantized(q, dtype) => Ok(q.dequantize(*dtype)?),
        }
    }

    /// How many of the rule's inputs are the layer's: the weight (a tensor) and the bias.
    fn count(&self) -> usize {
        usize::from(matches!(self.w, SavedWeight::Dense(_))) + usize::from(self.bias.is_some())
    }

    /// The gradient of the product's operand `x` (recomputed, in the dtype the cheap op gave
    /// it; cast here to the product's and let go of as soon as the weight's gradient is made),
    /// in `x`'s dtype, and the gradients of the weight and the bias (the last entries of
    /// `needs`) as the rule returns them, from the output's gradient `g`. A weight stored
    /// quantized has no gradient, and takes no operand.
    fn grads(&self, x: Array, g: &Array, needs: &[bool]) -> Result<(Array, InputGrads)> {
        let weight_at = needs.len() - self.count();
        let (x_dtype, x_shape) = (x.dtype(), x.shape().clone());
        let mut grads = Vec::new();
        let w = match &self.w {
            SavedWeight::Dense(w) => {
                let w = w.array()?;
                let operand = in_dtype(&x, w.dtype())?;
                drop(x);
                let dw = when(needs[weight_at], || {
                    grad_b(&operand, w.shape(), g, false, true)
                })?;
                grads.push(dw);
                w.clone()
            }
            SavedWeight::Quantized(q, dtype) => {
                drop(x);
                q.dequantize(*dtype)?
            }
        };
        if let Some(shape) = &self.bias {
            grads.push(when(needs[needs.len() - 1], || reduce_to(g, shape))?);
        }
        let dx = grad_a(&x_shape, &w, g, false, true)?;
        drop(w);
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
        let count = layer.count();
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

/// The layers of `weights`.
fn layers_of<'a, W: Copy + Into<LinearWeight<'a>>>(
    weights: &[(W, Option<&'a Tensor>)],
) -> Result<Vec<Linear>> {
    weights
        .iter()
        .map(|&(w, b)| Linear::new(w.into(), b))
        .collect()
}

/// The op's own `inputs`, then every layer's weight and bias.
fn inputs_of<'a>(own: &[&'a Tensor], layers: &'a [Linear]) -> Vec<&'a Tensor> {
    let mut all = own.to_vec();
    for layer in layers {
        all = layer.inputs(&all);
    }
    all
}
