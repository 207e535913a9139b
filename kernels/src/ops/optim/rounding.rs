//! Stochastic rounding of f32 to bf16, for optimizer state kept narrower than its parameter and
//! for parameters kept in bf16.
//!
//! Rounded to nearest, a bf16 moment cannot follow AdamW's second-moment average: with
//! `beta2 = 0.999` each step moves it by 0.1%, under half of bf16's 0.8% spacing, so it never
//! moves at all. Rounded up with probability equal to the dropped fraction, the stored value
//! is unbiased and the average follows in expectation. A bf16 parameter fares the same: an
//! update under half its spacing (lr 1e-5 on a weight of 0.1, whose spacing is 5e-4) is lost
//! to nearest rounding every step, and kept on average by stochastic rounding. The random bits
//! come from the counter-based generator, so every backend rounds alike.

use half::bf16;

use crate::dtype::{Compute, DType, Float};
use crate::ops::random::kernels::random_bits;

/// A parameter's new value `x` stored as `T`: a bf16 parameter rounded stochastically with
/// the draw of element `at` on `seed`, any other rounded to nearest (bit for bit what
/// [`Float::store`] gives).
#[inline]
pub(crate) fn store_param<T: Float>(x: T::C, seed: u64, at: u64) -> T {
    if T::DTYPE == DType::BF16 {
        return store_drawn(x, random_bits(seed, at));
    }
    T::store(x)
}

/// [`store_param`] with the draw given (its top 16 bits round a bf16 parameter).
#[inline]
pub(crate) fn store_drawn<T: Float>(x: T::C, draw: u64) -> T {
    if T::DTYPE == DType::BF16 {
        // `T` is bf16 itself, the one type of that dtype (the cast cannot fail).
        let rounded = bf16_stochastic(x.f64() as f32, draw);
        return bytemuck::try_cast(rounded).unwrap_or_else(|_| T::store(x));
    }
    T::store(x)
}

/// One element's three roundings' draws (AdamW's two moments and its parameter) from one
/// 64-bit draw: 16 bits each, moved to where [`bf16_stochastic`] reads them.
#[inline]
pub(crate) fn split_draw(draw: u64) -> [u64; 3] {
    [draw, draw << 16, draw << 32]
}

/// `x` rounded to bf16 up or down at random: the 16 bits that bf16 drops, plus `draw`'s top 16
/// bits, carry into the kept bits with probability equal to the dropped fraction.
/// Infinities and NaN stay what they are (a NaN quieted, as rounding to nearest gives it).
#[inline]
pub fn bf16_stochastic(x: f32, draw: u64) -> bf16 {
    // An infinity's dropped bits are zeros, so it carries into itself; only a NaN's could
    // carry out of it. A select rather than a branch, so that a loop of them vectorizes.
    let bits = x.to_bits();
    let carried = (bits.wrapping_add((draw >> 48) as u32) >> 16) as u16;
    let quiet_nan = (bits >> 16) as u16 | 0x0040;
    bf16::from_bits(if x.is_nan() { quiet_nan } else { carried })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_values_stay_and_others_round_to_a_neighbour_without_bias() {
        assert_eq!(bf16_stochastic(1.5, u64::MAX).to_f32(), 1.5);
        assert!(bf16_stochastic(f32::NAN, 0).is_nan());
        // Every NaN (whose low bits would carry out of it) and infinity is what rounding to
        // nearest gives, whatever the draw.
        for bits in [
            0x7fff_ffff,
            0xffff_ffff,
            0x7f80_0001,
            0x7f80_0000,
            0xff80_0000,
        ] {
            let x = f32::from_bits(bits);
            for draw in [0, u64::MAX, 1 << 63] {
                let nearest: bf16 = Float::store(x);
                assert_eq!(
                    bf16_stochastic(x, draw).to_bits(),
                    nearest.to_bits(),
                    "{bits:#x}"
                );
            }
        }
        assert_eq!(
            bf16_stochastic(f32::NEG_INFINITY, u64::MAX),
            bf16::NEG_INFINITY
        );
        let (below, above) = (1.0f32, 1.0 + 1.0 / 128.0);
        let x = below + 0.3 * (above - below);
        let n = 20_000;
        let mut mean = 0.0f64;
        for i in 0..n {
            let r = bf16_stochastic(-x, random_bits(3, i)).to_f32();
            assert!(r == -below || r == -above);
            mean += f64::from(r) / n as f64;
        }
        assert!((mean + f64::from(x)).abs() < 0.02 * f64::from(above - below));
    }

    #[test]
    fn a_slow_average_keeps_moving() {
        // 0.999 v + 0.001 g^2 with g^2 = 2: v climbs from 1 toward 2 however small each move.
        let mut v = bf16::ONE;
        for i in 0..2000 {
            v = bf16_stochastic(0.999 * v.to_f32() + 0.001 * 2.0, random_bits(11, i));
        }
        let exact = 2.0 - 0.999f32.powi(2000);
        assert!((v.to_f32() - exact).abs() < 0.05, "{v} against {exact}");
        let nearest = (0..2000).fold(bf16::ONE, |v, _| bf16::from_f32(0.999 * v.to_f32() + 0.002));
        assert_eq!(nearest, bf16::ONE, "rounded to nearest it never moves");
    }

    #[test]
    fn one_draw_rounds_three_values_independently() {
        // Halfway between two bf16 values: each rounding goes up with probability 1/2, and
        // each of the eight outcomes of three independent ones comes 1/8 of the time.
        let x = 1.0 + 1.0 / 256.0;
        let draws = 1 << 16;
        let mut outcomes = [0u32; 8];
        for i in 0..draws {
            let ups = split_draw(random_bits(5, i)).map(|d| bf16_stochastic(x, d).to_f32() > x);
            outcomes[ups
                .iter()
                .enumerate()
                .map(|(b, &up)| usize::from(up) << b)
                .sum::<usize>()] += 1;
        }
        for count in outcomes {
            let share = f64::from(count) / draws as f64;
            assert!((share - 0.125).abs() < 0.006, "{outcomes:?}");
        }
    }
}
