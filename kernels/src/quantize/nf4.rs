//! NF4, the 4-bit NormalFloat of QLoRA (Dettmers et al. 2023): each block of `block` values is
//! scaled by its largest magnitude (its absmax) into [-1, 1], and each scaled value is stored
//! as the index of the nearest of 16 levels, the quantiles of a normal distribution, two
//! indices to a byte.
//!
//! The rules are bitsandbytes' (`quantize_4bit(..., quant_type="nf4")`), to the bit: a block
//! is scaled by the reciprocal of its absmax (floored at 1e-38; a partial last block is
//! divided by it instead), clamped to [-1, 1], and bucketed against the midpoints of the
//! levels, a value on a midpoint going to the lower level; the even element of each pair takes
//! the high nibble, and an odd count is padded with a zero. A value dequantizes to its level
//! times its block's absmax. The absmaxes stay f32 here; [`crate::quantize::double`] quantizes
//! them again, as QLoRA does.

use crate::error::{Error, Result};
use crate::quantize::check_input;

/// The 16 levels, in ascending order, as bitsandbytes' `get_4bit_type("nf4")` lists them.
pub const LEVELS: [f32; 16] = [
    -1.0,
    -0.696_192_8,
    -0.525_073_05,
    -0.394_917_5,
    -0.284_441_38,
    -0.184_773_43,
    -0.091_050_036,
    0.0,
    0.079_580_3,
    0.160_930_2,
    0.246_112_3,
    0.337_915_24,
    0.440_709_83,
    0.562_617,
    0.722_956_84,
    1.0,
];

/// The smallest absmax a block is scaled by (bitsandbytes' floor: a block of zeros stays zero).
const ABSMAX_FLOOR: f32 = 1e-38;

/// A tensor's values in NF4.
#[derive(Debug, Clone, PartialEq)]
pub struct Nf4 {
    /// Two level indices a byte, the even element in the high nibble: `len.div_ceil(2)` bytes.
    pub packed: Vec<u8>,
    /// Each block's largest magnitude: `len.div_ceil(block)` of them.
    pub absmax: Vec<f32>,
    /// Values per block (bitsandbytes' `blocksize`; QLoRA uses 64).
    pub block: usize,
    /// How many values.
    pub len: usize,
}

impl Nf4 {
    /// `values` in blocks of `block`, which must be positive and even; every value must be
    /// finite.
    pub fn quantize(values: &[f32], block: usize) -> Result<Self> {
        if block == 0 || block % 2 == 1 {
            return Err(Error::Argument {
                op: "nf4",
                detail: format!(
                    "blocks of {block} values: a block must hold a positive, even count"
                ),
            });
        }
        check_input("nf4", values, block)?;
        let bounds: [f32; 15] = std::array::from_fn(|i| (LEVELS[i] + LEVELS[i + 1]) / 2.0);
        let level = |scaled: f32| bounds.iter().filter(|&&b| b < scaled).count() as u8;
        let mut indices = Vec::with_capacity(values.len() + 1);
        let mut absmax = Vec::with_capacity(values.len().div_ceil(block));
        for chunk in values.chunks(block) {
            let largest = chunk.iter().fold(0.0_f32, |m, v| m.max(v.abs()));
            let floored = largest.max(ABSMAX_FLOOR);
            let scaled = |v: f32| {
                let s = if chunk.len() == block {
                    v * (1.0 / floored)
                } else {
                    v / floored
                };
                s.clamp(-1.0, 1.0)
            };
            indices.extend(chunk.iter().map(|&v| level(scaled(v))));
            // bitsandbytes keeps a partial last block's absmax floored, a whole block's as it is.
            absmax.push(if chunk.len() == block {
                largest
            } else {
                floored
            });
        }
        if indices.len() % 2 == 1 {
            indices.push(level(0.0));
        }
        let packed = indices.chunks(2).map(|p| (p[0] << 4) | p[1]).collect();
        Ok(Self {
            packed,
            absmax,
            block,
            len: values.len(),
        })
    }

    /// The level index of value `i`.
    pub fn index(&self, i: usize) -> u8 {
        let byte = self.packed[i / 2];
        if i.is_multiple_of(2) {
            byte >> 4
        } else {
            byte & 0x0F
        }
    }

    /// The values back: each its level times its block's absmax.
    pub fn dequantize(&self) -> Vec<f32> {
        (0..self.len)
            .map(|i| LEVELS[usize::from(self.index(i))] * self.absmax[i / self.block])
            .collect()
    }

    /// Bytes held: the packed indices and the absmaxes in f32.
    pub fn bytes(&self) -> usize {
        self.packed.len() + 4 * self.absmax.len()
    }
}
