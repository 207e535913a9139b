//! `exp` and `tanh` for f32 written so that the compiler vectorizes the loops that call them:
//! only multiplies, adds, comparisons and bit operations (no calls, no rounding instructions
//! beyond SSE2). Cephes' polynomials; accurate to a few units in the last place.

/// 1.5 * 2^23: adding it rounds a float below 2^22 in magnitude to an integer (round to nearest)
/// held in the low mantissa bits.
const ROUNDER: f32 = 12_582_912.0;
/// The bits of `ROUNDER`.
const ROUNDER_BITS: i32 = 0x4B40_0000;
/// Above this, `exp` overflows to infinity.
const EXP_HIGH: f32 = 88.722_84;
/// Below this, `exp` underflows to zero (the smallest subnormal is `exp(-103.28)`).
const EXP_LOW: f32 = -103.972_08;

/// 2^n for an integer `n` in [-150, 128], as two normal powers of two whose product it is (to
/// be applied one after the other: 2^128 itself is not a finite f32).
#[inline(always)]
fn pow2_factors(n: i32) -> (f32, f32) {
    let half = n >> 1;
    let factor = |k: i32| f32::from_bits(((k + 127) << 23) as u32);
    (factor(half), factor(n - half))
}

/// e^x for f32.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    let clamped = x.clamp(EXP_LOW, EXP_HIGH);
    let shifted = clamped * std::f32::consts::LOG2_E + ROUNDER;
    let n = shifted - ROUNDER;
    // r = x - n ln 2, with ln 2 split in two for precision.
    let r = clamped - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let (high, low) = pow2_factors(shifted.to_bits() as i32 - ROUNDER_BITS);
    let y = (p * r * r + r + 1.0) * high * low;
    if x.is_nan() {
        x
    } else if x > EXP_HIGH {
        f32::INFINITY
    } else if x < EXP_LOW {
        0.0
    } else {
        y
    }
}

/// tanh x for f32: an odd polynomial near 0, `1 - 2 / (e^{2|x|} + 1)` elsewhere.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let mut p = -5.704_988_7e-3_f32;
    p = p * z + 2.063_909e-2;
    p = p * z - 5.373_971_6e-2;
    p = p * z + 1.333_144_2e-1;
    p = p * z - 3.333_328e-1;
    // |p z x| < |x|, so the sign is x's; copysign only restores it for -0.
    let small = (p * z * x + x).copysign(x);
    // tanh(10) rounds to 1 in f32, so larger arguments need not reach exp.
    let large = (1.0 - 2.0 / (exp_f32(2.0 * a.min(10.0)) + 1.0)).copysign(x);
    if x.is_nan() {
        x
    } else if a < 0.625 {
        small
    } else {
        large
    }
}

/// tanh x for f32 as one rational function, `x P(x^2) / Q(x^2)` on [-9, 9] (a least-squares
/// fit made for this crate), clamped to [-1, 1]: within 4e-7 of tanh everywhere, so a few units
/// in the last place near ±1 and relatively less accurate than [`tanh_f32`] in between, but
/// about twice as fast (no exp, one division). For GELU, whose result is already an
/// approximation of the erf form.
#[inline(always)]
pub fn tanh_rational_f32(x: f32) -> f32 {
    let x = x.clamp(-9.0, 9.0);
    let z = x * x;
    let mut p = -8.638_424e-14_f32;
    p = p * z + 5.327_525e-11;
    p = p * z - 2.030_918_4e-8;
    p = p * z + 1.117_075_6e-5;
    p = p * z + 3.105_252_5e-3;
    p = p * z + 1.308_507_6e-1;
    p = p * z + 1.0;
    let mut q = 2.548_203_3e-4_f32;
    q = q * z + 2.450_005_3e-2;
    q = q * z + 4.641_84e-1;
    q = q * z + 1.0;
    (x * p / q).clamp(-1.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest error in units of the f32 result's magnitude over a dense grid.
    fn worst_relative(f: fn(f32) -> f32, reference: fn(f64) -> f64, lo: f32, hi: f32) -> f64 {
        let steps = 400_000;
        (0..=steps)
            .map(|i| {
                let x = lo + (hi - lo) * i as f32 / steps as f32;
                let want = reference(x as f64);
                let got = f(x) as f64;
                (got - want).abs() / want.abs().max(f64::MIN_POSITIVE)
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn exp_is_accurate_over_the_normal_range() {
        let worst = worst_relative(exp_f32, f64::exp, -87.0, 88.5);
        assert!(
            worst < 4.0 * f32::EPSILON as f64,
            "worst relative error {worst}"
        );
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(100.0), f32::INFINITY);
        assert_eq!(exp_f32(-200.0), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        let tiny = exp_f32(-100.0) as f64;
        assert!(
            (tiny - (-100f64).exp()).abs() < 1e-44,
            "subnormal results are kept: {tiny}"
        );
    }

    #[test]
    fn the_rational_tanh_is_within_4e7_everywhere() {
        let steps = 400_000;
        let worst = (0..=steps)
            .map(|i| {
                let x = -12.0 + 24.0 * i as f32 / steps as f32;
                (tanh_rational_f32(x) as f64 - (x as f64).tanh()).abs()
            })
            .fold(0.0, f64::max);
        assert!(worst < 4e-7, "worst absolute error {worst}");
        let near_zero = worst_relative(tanh_rational_f32, f64::tanh, -1e-3, 1e-3);
        assert!(
            near_zero < 2.0 * f32::EPSILON as f64,
            "near zero: {near_zero}"
        );
        assert!(tanh_rational_f32(f32::NAN).is_nan());
        assert_eq!(tanh_rational_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_rational_f32(f32::NEG_INFINITY), -1.0);
    }

    #[test]
    fn tanh_is_accurate_everywhere() {
        let worst = worst_relative(tanh_f32, f64::tanh, -12.0, 12.0);
        assert!(
            worst < 4.0 * f32::EPSILON as f64,
            "worst relative error {worst}"
        );
        let near_zero = worst_relative(tanh_f32, f64::tanh, -1e-3, 1e-3);
        assert!(
            near_zero < 2.0 * f32::EPSILON as f64,
            "near zero: {near_zero}"
        );
        assert!(tanh_f32(f32::NAN).is_nan());
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(-0.0).to_bits(), (-0.0f32).to_bits());
    }
}
