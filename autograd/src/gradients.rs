//! The result of a backward pass: a gradient per source tensor.

use std::collections::HashMap;

use headroom_alloc::Tag;
use headroom_kernels::Array;

use crate::error::Result;
use crate::tensor::{Tensor, TensorId};

/// Gradients keyed by the tensor they belong to (their shape and dtype). A source the target
/// does not depend on has none.
#[derive(Debug, Default)]
pub struct Gradients {
    map: HashMap<TensorId, Array>,
}

impl Gradients {
    pub(crate) fn new(map: HashMap<TensorId, Array>) -> Self {
        Self { map }
    }

    /// The gradient of `tensor`, if it has one.
    pub fn get(&self, tensor: &Tensor) -> Option<&Array> {
        self.map.get(&tensor.id())
    }

    /// Takes the gradient of `tensor` out, if it has one.
    pub fn remove(&mut self, tensor: &Tensor) -> Option<Array> {
        self.map.remove(&tensor.id())
    }

    /// The gradient of `tensor`, or zeros of its shape and dtype (tagged as gradients) when the
    /// target did not depend on it.
    pub fn get_or_zeros(&self, tensor: &Tensor) -> Result<Array> {
        match self.map.get(&tensor.id()) {
            Some(grad) => Ok(grad.clone()),
            None => {
                let _tag = tensor.device().scoped_tag(Tag::GRADIENTS);
                Ok(Array::zeros(
                    tensor.device(),
                    tensor.shape().clone(),
                    tensor.dtype(),
                )?)
            }
        }
    }

    /// Number of gradients held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no source got a gradient.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
