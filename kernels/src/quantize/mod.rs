//! Block-wise quantization of frozen weights, on the host: the formats a weight is stored in
//! before the products read it back: QLoRA's NF4 (`nf4`), with its scales quantized again
//! (`double`, on bitsandbytes' 8-bit dynamic map, `dynamic`), and block-wise absmax int8
//! (`int8`). Each quantizes as bitsandbytes does, so that a weight quantized here equals one
//! quantized there, to the bit (the tests say where bitsandbytes' CPU path rounds otherwise).

use crate::error::{Error, Result};

pub mod double;
pub mod dynamic;
pub mod int8;
pub mod nf4;

/// An error naming `op` unless blocks of `block` values can be formed (at least 1) and every
/// value of `values` is finite.
pub(crate) fn check_input(op: &'static str, values: &[f32], block: usize) -> Result<()> {
    if block == 0 {
        return Err(Error::Argument {
            op,
            detail: "blocks of 0 values".into(),
        });
    }
    match values.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(Error::Argument {
            op,
            detail: format!("value {i} is {}: only finite values quantize", values[i]),
        }),
        None => Ok(()),
    }
}
