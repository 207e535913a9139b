//! Block-wise absmax int8: each block of values scaled so that its largest magnitude is 127,
//! rounded to the nearest integer (ties to even), as bitsandbytes' `int8_vectorwise_quant`
//! quantizes a row (here a block is a row). A value comes back as its code times its block's
//! absmax over 127. 8.5 bits a value for blocks of 64.

use crate::error::Result;
use crate::quantize::check_input;

/// A tensor's values in int8.
#[derive(Debug, Clone, PartialEq)]
pub struct Int8 {
    /// One code a value.
    pub codes: Vec<i8>,
    /// Each block's largest magnitude.
    pub absmax: Vec<f32>,
    /// Values per block.
    pub block: usize,
}

impl Int8 {
    /// `values` in blocks of `block` (positive); every value finite. A block of zeros stores
    /// zeros.
    pub fn quantize(values: &[f32], block: usize) -> Result<Self> {
        check_input("int8", values, block)?;
        let mut codes = Vec::with_capacity(values.len());
        let mut absmax = Vec::with_capacity(values.len().div_ceil(block));
        for chunk in values.chunks(block) {
            let largest = chunk.iter().fold(0.0_f32, |m, v| m.max(v.abs()));
            absmax.push(largest);
            let scale = match largest {
                0.0 => 0.0,
                _ => 127.0 / largest,
            };
            codes.extend(chunk.iter().map(|&v| (v * scale).round_ties_even() as i8));
        }
        Ok(Self {
            codes,
            absmax,
            block,
        })
    }

    /// The values back.
    pub fn dequantize(&self) -> Vec<f32> {
        let step: Vec<f32> = self.absmax.iter().map(|a| a / 127.0).collect();
        self.codes
            .iter()
            .enumerate()
            .map(|(i, &c)| f32::from(c) * step[i / self.block])
            .collect()
    }

    /// Bytes held: a byte a value and an f32 a block.
    pub fn bytes(&self) -> usize {
        self.codes.len() + 4 * self.absmax.len()
    }
}
