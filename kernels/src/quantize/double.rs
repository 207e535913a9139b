//! QLoRA's double quantization: NF4 values whose blocks' scales are quantized again, their
//! mean subtracted, in blocks of 256 on the 8-bit dynamic map ([`crate::quantize::dynamic`]), as
//! bitsandbytes' `quantize_4bit(..., compress_statistics=True)` stores them: 4.13 bits a value
//! for blocks of 64 instead of 4.5.

use crate::error::Result;
use crate::quantize::dynamic::{Blockwise, dynamic_map};
use crate::quantize::nf4::{LEVELS, Nf4};

/// Scales per block of quantized scales (bitsandbytes' default).
pub const SCALE_BLOCK: usize = 256;

/// NF4 values with their blocks' scales quantized to 8 bits.
#[derive(Debug, Clone, PartialEq)]
pub struct DoubleQuantized {
    /// Two level indices a byte, the even element in the high nibble.
    pub packed: Vec<u8>,
    /// The scales less `offset`, quantized in blocks of [`SCALE_BLOCK`].
    pub scales: Blockwise,
    /// The scales' mean, added back when they are dequantized.
    pub offset: f32,
    /// Values per NF4 block.
    pub block: usize,
    /// How many values.
    pub len: usize,
}

impl DoubleQuantized {
    /// `values` in NF4 blocks of `block` (positive, even), their scales quantized again.
    pub fn quantize(values: &[f32], block: usize) -> Result<Self> {
        let nf4 = Nf4::quantize(values, block)?;
        let count = nf4.absmax.len().max(1) as f64;
        let mean = nf4.absmax.iter().map(|&a| f64::from(a)).sum::<f64>() / count;
        let offset = mean as f32;
        let centred: Vec<f32> = nf4.absmax.iter().map(|a| a - offset).collect();
        let scales = Blockwise::quantize(&centred, SCALE_BLOCK, &dynamic_map())?;
        Ok(Self {
            packed: nf4.packed,
            scales,
            offset,
            block,
            len: nf4.len,
        })
    }

    /// Each NF4 block's scale back: its code times its block's scale, plus the offset.
    pub fn absmax(&self) -> Vec<f32> {
        let map = dynamic_map();
        self.scales
            .dequantize(&map)
            .into_iter()
            .map(|s| s + self.offset)
            .collect()
    }

    /// The values back: each its level times its block's scale.
    pub fn dequantize(&self) -> Vec<f32> {
        let absmax = self.absmax();
        (0..self.len)
            .map(|i| {
                let byte = self.packed[i / 2];
                let index = if i.is_multiple_of(2) {
                    byte >> 4
                } else {
                    byte & 0x0F
                };
                LEVELS[usize::from(index)] * absmax[i / self.block]
            })
            .collect()
    }

    /// Bytes held: the packed indices, a byte per scale, an f32 per block of scales and the
    /// offset.
    pub fn bytes(&self) -> usize {
        self.packed.len() + self.scales.codes.len() + 4 * self.scales.absmax.len() + 4
    }
}
