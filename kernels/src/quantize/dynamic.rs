//! The 8-bit signed dynamic map of bitsandbytes' block-wise quantization
//! (`create_dynamic_map(signed=True)`, Dettmers et al. 2022), which QLoRA's double
//! quantization stores the NF4 blocks' scales on: 0, 1 and, for each of seven decimal
//! exponents, the means of evenly spaced fractions in [0.1, 1] of that decade, both signs, the
//! finer the larger; sorted, 256 codes from -0.99297 to 1.
//!
//! A block of values is stored as its largest magnitude and, per value, the index of the code
//! nearest to the value over that magnitude (the lower of two at equal distance).

use crate::error::Result;
use crate::quantize::check_input;

/// The decades of the seven exponents, as f64 literals (Python's `10 ** e`), rounded to f32
/// where used.
const DECADES: [f64; 7] = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0];

/// The 256 codes, ascending.
pub fn dynamic_map() -> [f32; 256] {
    let mut codes = Vec::with_capacity(256);
    // Seven exponents; 7 bits after the sign give the largest decade 2^6 fractions.
    for exponent in 0..7i32 {
        let items = (1usize << exponent) + 1;
        let bounds = linspace(0.1, 1.0, items);
        let scale = DECADES[exponent as usize] as f32;
        for pair in bounds.windows(2) {
            let mean = (pair[0] + pair[1]) / 2.0;
            codes.push(scale * mean);
            codes.push(-(scale * mean));
        }
    }
    codes.extend([0.0, 1.0]);
    codes.resize(256, 0.0);
    codes.sort_by(f32::total_cmp);
    let mut out = [0.0; 256];
    out.copy_from_slice(&codes);
    out
}

/// `steps` values from `start` to `end` in f32 as `torch.linspace` computes them: from the
/// start in the first half, from the end in the second, each a fused multiply-add.
fn linspace(start: f32, end: f32, steps: usize) -> Vec<f32> {
    let step = (end - start) / (steps - 1) as f32;
    let half = steps / 2;
    (0..steps)
        .map(|i| match i < half {
            true => step.mul_add(i as f32, start),
            false => (-step).mul_add((steps - i - 1) as f32, end),
        })
        .collect()
}

/// Values quantized in blocks on a code book: each block's largest magnitude, and per value
/// the index of the nearest code to the value over it.
#[derive(Debug, Clone, PartialEq)]
pub struct Blockwise {
    /// One index a value.
    pub codes: Vec<u8>,
    /// Each block's largest magnitude.
    pub absmax: Vec<f32>,
    /// Values per block.
    pub block: usize,
}

impl Blockwise {
    /// `values` in blocks of `block` (positive) on `map` (ascending); every value finite. A
    /// block of zeros stores index 0 throughout, and comes back as zeros.
    pub fn quantize(values: &[f32], block: usize, map: &[f32; 256]) -> Result<Self> {
        check_input("blockwise quantization", values, block)?;
        let mut codes = Vec::with_capacity(values.len());
        let mut absmax = Vec::with_capacity(values.len().div_ceil(block));
        for chunk in values.chunks(block) {
            let largest = chunk.iter().fold(0.0_f32, |m, v| m.max(v.abs()));
            absmax.push(largest);
            if largest == 0.0 {
                codes.extend(std::iter::repeat_n(0, chunk.len()));
                continue;
            }
            codes.extend(chunk.iter().map(|&v| nearest(map, v / largest)));
        }
        Ok(Self {
            codes,
            absmax,
            block,
        })
    }

    /// The values back: each code times its block's largest magnitude.
    pub fn dequantize(&self, map: &[f32; 256]) -> Vec<f32> {
        self.codes
            .iter()
            .enumerate()
            .map(|(i, &c)| match self.absmax[i / self.block] {
                0.0 => 0.0,
                scale => map[usize::from(c)] * scale,
            })
            .collect()
    }
}

/// The index of the code of `map` nearest to `x` (the lower at equal distance).
fn nearest(map: &[f32; 256], x: f32) -> u8 {
    // The last code at most `x` (or the first), then the nearer of it and the next.
    let below = map.partition_point(|&c| c <= x).saturating_sub(1);
    let index = match map.get(below + 1) {
        Some(&above) if (above - x).abs() < (x - map[below]).abs() => below + 1,
        _ => below,
    };
    index as u8
}
