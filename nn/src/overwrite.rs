//! A parameter's array overwritten in place with loaded values, whatever format they came
//! from, so that a model's old and new weights are never both held.

use std::borrow::Cow;

use headroom_alloc::Tag;
use headroom_kernels::{Array, DType, Shape};

use crate::decoder::Gpt;
use crate::error::Result;
use crate::lora::{visit_base, visit_base_mut};

/// Overwrites `array` with `bytes` of `stored` in place, so that a model's old and new weights
/// are never both held and its memory stays laid out as it was built; an array another handle
/// shares gets new memory.
pub(crate) fn overwrite(array: &mut Array, stored: DType, bytes: &[u8]) -> Result<()> {
    if !array.is_shared() {
        return Ok(array.write_bytes(stored, bytes)?);
    }
    let device = array.device().clone();
    let _weights = device.scoped_tag(Tag::WEIGHTS);
    let loaded = Array::from_bytes(&device, array.shape().clone(), stored, bytes)?;
    *array = match stored == array.dtype() {
        true => loaded,
        false => loaded.cast(array.dtype())?,
    };
    Ok(())
}

/// Every tensor of `gpt`'s base (its tensors but the adapters) with its name and whole shape
/// (not its chunk's where the decoder is sharded), in visiting order: what a loader fills.
pub(crate) fn base_shapes(gpt: &Gpt) -> Vec<(String, Shape)> {
    let shards = gpt.param_shards();
    let mut out = Vec::new();
    visit_base(gpt, &mut |name, t| {
        let whole = shards.and_then(|s| s.whole_shape(name));
        out.push((name.to_owned(), whole.unwrap_or(t.shape()).clone()));
    });
    out
}

/// The values a loader hands over for one tensor: the whole tensor's bytes, of a dtype.
pub(crate) type Write<'w> = &'w mut dyn FnMut(DType, &[u8]) -> Result<()>;

/// Overwrites every tensor of `gpt`'s base, in visiting order: `read` gets its name and whole
/// shape and hands the whole tensor's values to the [`Write`] it is given. Where the decoder
/// is sharded, each tensor keeps its rank's chunk of them alone, and no rank holds a whole
/// tensor on its device.
pub(crate) fn fill_base(
    gpt: &mut Gpt,
    mut read: impl FnMut(&str, &Shape, Write<'_>) -> Result<()>,
) -> Result<()> {
    let shards = gpt.param_shards().cloned();
    visit_base_mut(gpt, &mut |name, t| {
        let whole = shards.as_ref().and_then(|s| s.whole_shape(name)).cloned();
        let whole = whole.unwrap_or_else(|| t.shape().clone());
        let array = t.array_mut();
        read(name, &whole, &mut |stored, bytes| {
            let bytes = match &shards {
                Some(shards) => shards.own_bytes(name, stored.size(), bytes),
                None => Cow::Borrowed(bytes),
            };
            overwrite(array, stored, &bytes)
        })
    })
}
