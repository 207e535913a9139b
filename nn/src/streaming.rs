//! Weight streaming (ZeRO-Infinity's parameter offload): a module's weights kept on another
//! device, the device's host tier, and copied to the device that runs it each time it runs;
//! weights stored quantized (QLoRA's frozen base) travel as their codes and scales.

use headroom_alloc::Tag;
use headroom_kernels::Device;

use crate::error::Result;
use crate::module::Module;

/// A copy of `module` whose tensors are on `device`, each copied there by a recorded
/// [`Tensor::to_device`](headroom_autograd::Tensor::to_device) (tagged as weights), so that
/// their gradients go back to where the weights live. Tensors already on `device` are shared,
/// not copied. The copies live as long as the returned module and what the tape keeps of it.
pub fn fetched<M: Module + Clone>(module: &M, device: &Device) -> Result<M> {
    let mut copy = module.clone();
    let _weights = device.scoped_tag(Tag::WEIGHTS);
    copy.visit_mut(&mut |_, t| {
        *t = t.to_device(device)?;
        Ok(())
    })?;
    copy.visit_quantized_mut(&mut |stored| {
        if !stored.device().same(device) {
            *stored = stored.to_device(device)?;
        }
        Ok(())
    })?;
    Ok(copy)
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
