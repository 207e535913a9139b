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
        // The draw's value is a bf16, which every compute type holds exactly.
        let rounded = bf16_stochastic(x.f64() as f32, random_bits(seed, at));
        return T::store(T::C::of(f64::from(rounded.load())));
    }
    T::store(x)
}

/// `x` rounded to bf16 up or down at random: the 16 bits that bf16 drops, plus 16 random bits
/// from `draw`, carry into the kept bits with probability equal to the dropped fraction.
/// Infinities and NaN stay what they are.
#[inline]
pub fn bf16_stochastic(x: f32, draw: u64) -> bf16 {
    // Both roundings, then a select rather than a branch, so that a loop of them vectorizes.
    let carried = bf16::from_bits((x.to_bits().wrapping_add((draw >> 48) as u32) >> 16) as u16);
    let nearest: bf16 = Float::store(x);
    if x.is_finite() { carried } else { nearest }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_values_stay_and_others_round_to_a_neighbour_without_bias() {
        assert_eq!(bf16_stochastic(1.5, u64::MAX).to_f32(), 1.5);
        assert!(bf16_stochastic(f32::NAN, 0).is_nan());
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
}
