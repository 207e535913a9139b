//! Products with a weight stored quantized (QLoRA's frozen base): the weight is dequantized for
//! the product and let go of after it, in the forward pass and again in the backward pass; a
//! few rows against NF4 codes on a CPU read the codes as stored instead. The
//! rule keeps the stored codes alone: a frozen weight needs no gradient, so the input is not
//! kept either.

use headroom_kernels::DType;
use headroom_kernels::ops::gemm;
use headroom_kernels::ops::quant::Quantized;

use super::matmul::grad_a;
use super::{reduce_to, rule, when};
use crate::autocast::autocast_dtype;
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// `self @ weight^T + bias` for a frozen `weight` (`[out, in]`) stored quantized, in the
    /// weight's dtype (the autocast dtype under autocast), the input cast to it: what
    /// [`linear`](Self::linear) gives with the dequantized weight, bit for bit.
    pub fn quantized_linear(&self, weight: &Quantized, bias: Option<&Tensor>) -> Result<Tensor> {
        let dtype = product_dtype(weight);
        let x = self.for_matmul()?.cast(dtype)?;
        let b = bias.map(Tensor::for_matmul).transpose()?;
        // A few rows (a generation step) read NF4 codes as stored, where the device can.
        let on_codes = match &b {
            None => weight.few_rows_product(x.array())?,
            Some(_) => None,
        };
        let y = match on_codes {
            Some(y) => y,
            None => {
                let w = weight.dequantize(dtype)?;
                match &b {
                    Some(b) => gemm::matmul_bias(x.array(), &w, b.array(), false, true)?,
                    None => gemm::matmul(x.array(), &w, false, true)?,
                }
            }
        };
        let y = Tensor::output(y);
        let inputs: Vec<&Tensor> = std::iter::once(&x).chain(&b).collect();
        if let Some(rec) = begin(&inputs) {
            let stored = weight.clone();
            let account = saves(&stored.arrays());
            let (x_shape, b_shape) = (x.shape().clone(), b.as_ref().map(|b| b.shape().clone()));
            let backward = rule(move |g, needs| {
                let db = match &b_shape {
                    Some(shape) => Some(when(needs[1], || reduce_to(g, shape))?),
                    None => None,
                };
                let dx = when(needs[0], || {
                    grad_a(&x_shape, &stored.dequantize(dtype)?, g, false, true)
                })?;
                Ok(std::iter::once(dx).chain(db).collect())
            });
            rec.finish("quantized_linear", &[&y], account, backward);
        }
        Ok(y)
    }
}

/// The dtype a product with `weight` runs in: the autocast dtype under autocast (but for an f64
/// weight), the weight's own otherwise, as [`Tensor::for_matmul`] casts a weight that is a
/// tensor.
pub(super) fn product_dtype(weight: &Quantized) -> DType {
    match autocast_dtype() {
        Some(half) if weight.dtype() != DType::F64 => half,
        _ => weight.dtype(),
    }
}
