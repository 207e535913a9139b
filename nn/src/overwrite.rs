//! A parameter's array overwritten in place with loaded values, whatever format they came
//! from, so that a model's old and new weights are never both held.

use headroom_alloc::Tag;
use headroom_kernels::{Array, DType};

use crate::error::Result;

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
