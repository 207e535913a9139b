//! Weight streaming (ZeRO-Infinity's parameter offload): a module's weights kept on another
//! device, the device's host tier, and copied to the device that runs it each time it runs;
//! weights stored quantized (QLoRA's frozen base) travel as their codes and scales. The copies
//! can start ahead of the run ([`WeightsAhead`]), so that on a GPU they go beside the kernels
//! of the module before it.

use headroom_alloc::Tag;
use headroom_kernels::Device;
use headroom_kernels::ops::data::Arriving;
use headroom_kernels::ops::quant::ArrivingQuantized;

use crate::error::{Error, Result};
use crate::module::Module;

/// A copy of `module` whose tensors are on `device`, each copied there by a recorded
/// [`Tensor::to_device`](headroom_autograd::Tensor::to_device) (tagged as weights), so that
/// their gradients go back to where the weights live. Tensors already on `device` are shared,
/// not copied. The copies live as long as the returned module and what the tape keeps of it.
pub fn fetched<M: Module + Clone>(module: &M, device: &Device) -> Result<M> {
    // Copies handed over as soon as they are queued: the device's kernels wait for them from
    // here on, as after `to_device`.
    WeightsAhead::start(module, device)?.fetched(module)
}

/// A module's weights on their way to a device, copied ahead of its run: in the order the
/// module visits them, none for those already there.
#[derive(Debug)]
pub struct WeightsAhead {
    tensors: Vec<Option<Arriving>>,
    quantized: Vec<Option<ArrivingQuantized>>,
}

impl WeightsAhead {
    /// Starts copying `module`'s weights that are not on `device` there (tagged as weights):
    /// on a GPU the copies run beside the kernels queued until they are handed over
    /// ([`WeightsAhead::fetched`]); the memory is taken now.
    pub fn start<M: Module + Clone>(module: &M, device: &Device) -> Result<Self> {
        let _weights = device.scoped_tag(Tag::WEIGHTS);
        let mut tensors = Vec::new();
        let mut copy = module.clone();
        copy.visit_mut(&mut |_, t| {
            let ahead = (!t.device().same(device)).then(|| t.array().to_device_ahead(device));
            tensors.push(ahead.transpose()?);
            Ok(())
        })?;
        let mut quantized = Vec::new();
        copy.visit_quantized_mut(&mut |stored| {
            let ahead = (!stored.device().same(device)).then(|| stored.to_device_ahead(device));
            quantized.push(ahead.transpose()?);
            Ok(())
        })?;
        Ok(Self { tensors, quantized })
    }

    /// [`fetched`] with these copies, started for `module`: each copy handed over as a
    /// recorded [`Tensor::arrived`](headroom_autograd::Tensor::arrived), its gradient going
    /// back to where the weight lives.
    pub fn fetched<M: Module + Clone>(self, module: &M) -> Result<M> {
        let mismatch = || {
            Error::config(
                "weights fetched ahead",
                "copies started for another module".to_owned(),
            )
        };
        let mut copy = module.clone();
        let mut tensors = self.tensors.into_iter();
        copy.visit_mut(&mut |_, t| {
            if let Some(ahead) = tensors.next().ok_or_else(mismatch)? {
                *t = t.arrived(ahead)?;
            }
            Ok(())
        })?;
        let mut quantized = self.quantized.into_iter();
        copy.visit_quantized_mut(&mut |stored| {
            if let Some(ahead) = quantized.next().ok_or_else(mismatch)? {
                *stored = ahead.arrived()?;
            }
            Ok(())
        })?;
        match tensors.next().is_none() && quantized.next().is_none() {
            true => Ok(copy),
            false => Err(mismatch()),
        }
    }
}

/// Moves every tensor of `module` that is not on `to` there (tagged as weights), keeping each
/// tensor's identity and whether it is a parameter: the storage changes, nothing is recorded.
/// Weights stored quantized move too.
pub fn move_to(module: &mut dyn Module, to: &Device) -> Result<()> {
    let _weights = to.scoped_tag(Tag::WEIGHTS);
    module.visit_mut(&mut |_, t| {
        if !t.device().same(to) {
            let moved = t.array().to_device(to)?;
            *t.array_mut() = moved;
        }
        Ok(())
    })?;
    module.visit_quantized_mut(&mut |stored| {
        if !stored.device().same(to) {
            *stored = stored.to_device(to)?;
        }
        Ok(())
    })
}
