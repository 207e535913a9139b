//! Copies between a device and its host tier, differentiable: the gradient goes back the
//! other way.

use headroom_alloc::Tag;
use headroom_kernels::ops::data::Arriving;
use headroom_kernels::{Array, Device};

use super::rule;
use crate::error::{Error, Result};
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// The values copied to `device` (the device of this tensor's host tier, or its host tier;
    /// itself, no copy, when it is already there); the gradient is copied back to this
    /// tensor's device, tagged as gradients there. A weight kept on the host streams to the
    /// device this way, and its gradient back to the host. The copy of a variable is a variable
    /// (a parameter of the module it is copied into), tracked through this op.
    pub fn to_device(&self, device: &Device) -> Result<Tensor> {
        if self.device().same(device) {
            return Ok(self.clone());
        }
        self.copied(self.array().to_device(device)?)
    }

    /// [`Tensor::to_device`] with the copy fetched ahead: `copy` is this tensor's array copied
    /// by [`Array::to_device_ahead`], handed over now (the device's kernels wait for it from
    /// here on), recorded as `to_device` is.
    pub fn arrived(&self, copy: Arriving) -> Result<Tensor> {
        let copy = copy.arrived()?;
        if copy.shape() != self.shape() || copy.dtype() != self.dtype() {
            return Err(Error::Argument {
                op: "arrived",
                detail: format!(
                    "a copy of {} {} for a tensor of {} {}",
                    copy.dtype(),
                    copy.shape(),
                    self.dtype(),
                    self.shape()
                ),
            });
        }
        self.copied(copy)
    }

    /// `copy`, this tensor's values on another device, recorded so that the gradient goes
    /// back to this tensor's device.
    fn copied(&self, copy: Array) -> Result<Tensor> {
        let y = Tensor::output_variable(copy, self.is_variable());
        if let Some(rec) = begin(&[self]) {
            let home = self.device().clone();
            let back = move |g: &Array, _: &[bool]| {
                let _gradients = home.scoped_tag(Tag::GRADIENTS);
                Ok(vec![Some(g.to_device(&home)?)])
            };
            rec.finish("to_device", &[&y], saves(&[]), rule(back));
        }
        Ok(y)
    }
}
