//! A linear layer's weight: a tensor, or codes stored quantized (QLoRA's frozen base).

use headroom_alloc::Tag;
use headroom_autograd::{LinearWeight, Tensor};
use headroom_kernels::ops::quant::Quantized;
use headroom_kernels::{DType, Device};

use crate::error::Result;

/// `[out, in]`, as a tensor (trained, or frozen) or stored quantized (always frozen).
#[derive(Debug, Clone)]
pub enum Weight {
    /// The values themselves.
    Dense(Tensor),
    /// Codes and block scales, dequantized inside each product ([`Tensor::quantized_linear`]).
    Quantized(Box<Quantized>),
}

impl Weight {
    /// `[out, in]`.
    pub fn dims(&self) -> &[usize] {
        match self {
            Weight::Dense(t) => t.dims(),
            Weight::Quantized(q) => q.dims(),
        }
    }

    /// The dtype of its values (what a quantized weight dequantizes to).
    pub fn dtype(&self) -> DType {
        match self {
            Weight::Dense(t) => t.dtype(),
            Weight::Quantized(q) => q.dtype(),
        }
    }

    /// Its device.
    pub fn device(&self) -> &Device {
        match self {
            Weight::Dense(t) => t.device(),
            Weight::Quantized(q) => q.device(),
        }
    }

    /// The tensor, unless it is stored quantized.
    pub fn dense(&self) -> Option<&Tensor> {
        match self {
            Weight::Dense(t) => Some(t),
            Weight::Quantized(_) => None,
        }
    }

    /// The stored codes, if it is stored quantized.
    pub fn quantized(&self) -> Option<&Quantized> {
        match self {
            Weight::Dense(_) => None,
            Weight::Quantized(q) => Some(q),
        }
    }

    /// Its values as a frozen tensor when stored quantized (a new array, tagged as weights),
    /// the tensor itself otherwise.
    pub fn values(&self) -> Result<Tensor> {
        match self {
            Weight::Dense(t) => Ok(t.clone()),
            Weight::Quantized(q) => {
                let _weights = q.device().scoped_tag(Tag::WEIGHTS);
                Ok(Tensor::new(q.dequantize(q.dtype())?))
            }
        }
    }

    /// Calls `f` with the stored codes, if it is stored quantized: a layer's
    /// [`Module::visit_quantized_mut`](crate::Module::visit_quantized_mut).
    pub fn visit_quantized_mut(
        &mut self,
        f: &mut dyn FnMut(&mut Quantized) -> Result<()>,
    ) -> Result<()> {
        match self {
            Weight::Quantized(stored) => f(stored),
            Weight::Dense(_) => Ok(()),
        }
    }

    /// The weight as a selective op takes it.
    pub fn product(&self) -> LinearWeight<'_> {
        match self {
            Weight::Dense(t) => LinearWeight::Dense(t),
            Weight::Quantized(q) => LinearWeight::Quantized(q),
        }
    }

    /// `x @ self^T + bias`.
    pub fn linear(&self, x: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        Ok(match self {
            Weight::Dense(w) => x.linear(w, bias)?,
            Weight::Quantized(q) => x.quantized_linear(q, bias)?,
        })
    }
}
