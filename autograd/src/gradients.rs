//! The result of a backward pass: a gradient per source tensor.

use std::collections::HashMap;

use headroom_alloc::Tag;
use headroom_kernels::Array;
use headroom_kernels::ops::elementwise::{add, add_into};

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

    /// Sets the gradient of `tensor` (one of its shape and dtype), replacing any it had.
    pub fn insert(&mut self, tensor: &Tensor, grad: Array) -> Result<()> {
        if grad.shape() != tensor.shape() || grad.dtype() != tensor.dtype() {
            return Err(crate::Error::Argument {
                op: "Gradients::insert",
                detail: format!(
                    "a gradient of {} {} for a tensor of {} {}",
                    grad.shape(),
                    grad.dtype(),
                    tensor.shape(),
                    tensor.dtype()
                ),
            });
        }
        self.map.insert(tensor.id(), grad);
        Ok(())
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

    /// Adds `other`'s gradients into these, in place (gradient accumulation over
    /// micro-batches): a tensor new here takes `other`'s array as it is, one present in both is
    /// summed into the array already here, in place when no other handle shares it. A failure
    /// (gradients of another shape or dtype, or no memory for a sum) changes nothing. Accumulating with
    /// gradients of a different shape or dtype is an error, and then nothing changes.
    ///
    /// ```
    /// use headroom_autograd::{Gradients, Tape, Tensor};
    /// use headroom_kernels::{Array, DType, Device, DeviceConfig};
    /// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
    /// let w = Tensor::variable(Array::full(&cpu, [2], DType::F32, 3.0)?);
    /// let mut total = Gradients::default();
    /// for _ in 0..2 {
    ///     let tape = Tape::new();
    ///     let loss = tape.record(|| w.mul(&w)?.sum_all())?;
    ///     total.accumulate(tape.gradient(&loss, &[&w])?)?;
    /// }
    /// assert_eq!(total.get(&w).unwrap().to_f64()?, [12., 12.]);
    /// # Ok::<(), headroom_autograd::Error>(())
    /// ```
    pub fn accumulate(&mut self, other: Gradients) -> Result<()> {
        for (id, grad) in &other.map {
            if let Some(mine) = self.map.get(id)
                && (mine.shape() != grad.shape() || mine.dtype() != grad.dtype())
            {
                return Err(crate::Error::Argument {
                    op: "accumulate",
                    detail: format!(
                        "a gradient of {} {} into one of {} {}",
                        grad.shape(),
                        grad.dtype(),
                        mine.shape(),
                        mine.dtype()
                    ),
                });
            }
        }
        // Sums that need new memory (into a shared array) first: if one runs out, nothing has
        // changed yet.
        let mut fresh = Vec::new();
        for (id, grad) in &other.map {
            if let Some(mine) = self.map.get(id).filter(|m| m.is_shared()) {
                // Two sources can share one gradient array (both operands of an addition);
                // summing into it in place would change the other.
                fresh.push((*id, add(mine, grad)?));
            }
        }
        let summed: Vec<TensorId> = fresh.iter().map(|(id, _)| *id).collect();
        for (id, sum) in fresh {
            self.map.insert(id, sum);
        }
        // The rest sum in place (no allocation, so nothing can run out).
        for (id, grad) in other.map {
            if summed.contains(&id) {
                continue;
            }
            match self.map.get_mut(&id) {
                Some(mine) => add_into(mine, &grad)?,
                None => {
                    self.map.insert(id, grad);
                }
            }
        }
        Ok(())
    }

    /// Bytes of gradient data held.
    pub fn bytes(&self) -> u64 {
        self.map.values().map(|g| g.buffer().bytes() as u64).sum()
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
