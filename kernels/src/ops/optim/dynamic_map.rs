//! The 8-bit dynamic map of block-wise quantized optimizer state (Dettmers et al. 2022,
//! "8-bit Optimizers via Block-wise Quantization").
//!
//! A value is stored as a code relative to its block's scale (the block's largest magnitude),
//! so the code covers [-1, 1] or [0, 1]. The code is a dynamic tree: after the sign bit (signed
//! map only), the number of zero bits before the first one is a decimal exponent `e`, and the
//! bits after that one are a linear fraction, so a code stands for `10^-e * (0.1 + 0.9 (k + 1)
//! / 2^F)` with `k` the fraction's `F` bits; the all-zero code is 0. Small values get
//! exponents and large ones get fraction bits: the relative error stays small over seven decades,
//! which AdamW's second moment (squares of gradients) needs. The largest code is exactly 1, so
//! each block's largest magnitude survives exactly.
//!
//! Codes grow with the values they stand for, so encoding is a binary search for the two codes
//! around a value, then a stochastic choice between them in proportion to the distances: the
//! encoded value is unbiased, and a moment that decays by 0.1% a step keeps decaying, where
//! rounding to nearest would leave it stuck on its code. The CUDA kernels (`optim.cu`) compute
//! the same values with the same f32 operations, so every backend stores the same codes.

/// Elements per quantization block, each block with its own scale.
pub const QUANT_BLOCK: usize = 2048;

/// The decimal exponents a code can select.
const POW10: [f32; 8] = [1.0, 0.1, 0.01, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7];

/// Bits of the unsigned map's codes (AdamW's second moment, never negative).
const UNSIGNED_BITS: u32 = 8;
/// Bits of the signed map's magnitude (after its sign bit: AdamW's first moment).
const SIGNED_BITS: u32 = 7;
/// The signed map's sign bit.
const SIGN: u8 = 0x80;

/// The magnitude, in [0, 1], of the `bits`-bit magnitude code `code`.
#[inline]
fn magnitude(code: u32, bits: u32) -> f32 {
    if code == 0 {
        return 0.0;
    }
    // The highest set bit marks the end of the exponent's zeros; the bits below it are the
    // fraction.
    let top = 31 - code.leading_zeros();
    let exponent = (bits - 1 - top) as usize;
    let fraction = (code & ((1 << top) - 1)) + 1;
    let linear = fraction as f32 * (1.0 / (1u32 << top) as f32);
    POW10[exponent] * (0.1 + 0.9 * linear)
}

/// The `bits`-bit magnitude code for `y` in [0, 1]: one of the two codes around it, the upper
/// with probability proportional to `y`'s distance from the lower (`draw`'s top 24 bits are the
/// uniform number that decides). NaN encodes as 0.
#[inline]
fn encode_magnitude(y: f32, bits: u32, draw: u64) -> u32 {
    let top = (1u32 << bits) - 1;
    if y.is_nan() || y <= 0.0 {
        return 0;
    }
    if y >= 1.0 {
        return top;
    }
    // The largest code whose magnitude is at most `y`.
    let (mut low, mut high) = (0u32, top);
    while low < high {
        let mid = (low + high).div_ceil(2);
        if magnitude(mid, bits) <= y {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    let below = magnitude(low, bits);
    let above = magnitude(low + 1, bits);
    let up = (y - below) / (above - below);
    let uniform = (draw >> 40) as f32 * (1.0 / (1u32 << 24) as f32);
    if uniform < up { low + 1 } else { low }
}

/// The value in [-1, 1] that signed code `code` stands for.
#[inline]
pub fn decode_signed(code: u8) -> f32 {
    let value = magnitude(u32::from(code & !SIGN), SIGNED_BITS);
    if code & SIGN != 0 { -value } else { value }
}

/// The signed code of `y` in [-1, 1], rounded stochastically with `draw`.
#[inline]
pub fn encode_signed(y: f32, draw: u64) -> u8 {
    let code = encode_magnitude(y.abs(), SIGNED_BITS, draw) as u8;
    if y < 0.0 && code != 0 {
        code | SIGN
    } else {
        code
    }
}

/// The value in [0, 1] that unsigned code `code` stands for.
#[inline]
pub fn decode_unsigned(code: u8) -> f32 {
    magnitude(u32::from(code), UNSIGNED_BITS)
}

/// The unsigned code of `y` in [0, 1] (negative values encode as 0), rounded stochastically
/// with `draw`.
#[inline]
pub fn encode_unsigned(y: f32, draw: u64) -> u8 {
    encode_magnitude(y, UNSIGNED_BITS, draw) as u8
}

/// Number of quantization blocks for `len` elements.
pub fn blocks(len: usize) -> usize {
    len.div_ceil(QUANT_BLOCK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::random::kernels::random_bits;

    #[test]
    fn codes_grow_with_their_values_and_span_seven_decades() {
        let unsigned: Vec<f32> = (0..=255).map(decode_unsigned).collect();
        assert!(unsigned.windows(2).all(|w| w[0] < w[1]));
        assert_eq!((unsigned[0], unsigned[255]), (0.0, 1.0));
        assert!((unsigned[1] - 1e-7).abs() < 1e-12);
        let signed: Vec<f32> = (0..=127).map(decode_signed).collect();
        assert!(signed.windows(2).all(|w| w[0] < w[1]));
        assert_eq!((signed[127], decode_signed(0xFF)), (1.0, -1.0));
        assert!((signed[1] - 1e-6).abs() < 1e-11);
        // Near 1 the unsigned map steps by 0.9 / 128 of the value.
        assert!((unsigned[255] - unsigned[254] - 0.9 / 128.0).abs() < 1e-6);
    }

    #[test]
    fn a_code_encodes_as_itself_and_values_between_codes_round_to_a_neighbour() {
        for code in 0..=255u8 {
            assert_eq!(encode_unsigned(decode_unsigned(code), u64::MAX), code);
            // The signed map's negative zero encodes as zero.
            let expected = if code == SIGN { 0 } else { code };
            assert_eq!(encode_signed(decode_signed(code), u64::MAX), expected);
        }
        let y = 0.5 * (decode_unsigned(200) + decode_unsigned(201));
        for draw in [0, u64::MAX] {
            assert!([200, 201].contains(&encode_unsigned(y, draw)));
        }
        assert_eq!(encode_unsigned(f32::NAN, 0), 0);
        assert_eq!(encode_unsigned(-0.5, 0), 0);
        assert_eq!(encode_signed(-2.0, 0), 0xFF);
    }

    #[test]
    fn stochastic_encoding_is_unbiased() {
        // A value a fifth of the way from one code to the next encodes up a fifth of the time.
        let (below, above) = (decode_unsigned(100), decode_unsigned(101));
        let y = below + 0.2 * (above - below);
        let n = 20_000;
        let mean: f64 = (0..n)
            .map(|i| f64::from(decode_unsigned(encode_unsigned(y, random_bits(7, i)))))
            .sum::<f64>()
            / n as f64;
        assert!(
            (mean - f64::from(y)).abs() < 0.02 * f64::from(above - below),
            "{mean} against {y}"
        );
        let signed: f64 = (0..n)
            .map(|i| f64::from(decode_signed(encode_signed(-y, random_bits(8, i)))))
            .sum::<f64>()
            / n as f64;
        assert!((signed + f64::from(y)).abs() < 0.05 * f64::from(above - below));
    }
}
