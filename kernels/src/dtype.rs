//! Element types: what a buffer holds, and how float kernels compute on it.

use half::{bf16, f16};

/// The type of a buffer's elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 64-bit float, for reference and gradient checks.
    F64,
    /// IEEE half precision; computed in f32, stored in 16 bits.
    F16,
    /// bfloat16; computed in f32, stored in 16 bits.
    BF16,
    /// 32-bit unsigned integer (token ids, class labels).
    U32,
    /// 32-bit signed integer.
    I32,
    /// 8-bit unsigned integer (the codes of block-wise quantized optimizer state).
    U8,
}

impl DType {
    /// Every dtype.
    pub const ALL: [DType; 7] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::U32,
        DType::I32,
        DType::U8,
    ];

    /// The float dtypes.
    pub const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F64 => 8,
            DType::F32 | DType::U32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::U8 => 1,
        }
    }

    /// True for the float dtypes.
    pub fn is_float(self) -> bool {
        Self::FLOATS.contains(&self)
    }

    /// The dtype's name, as in PyTorch (`f32`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::U32 => "u32",
            DType::I32 => "i32",
            DType::U8 => "u8",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that can be stored in a buffer.
pub trait Element: bytemuck::Pod + Send + Sync + 'static {
    /// Its dtype.
    const DTYPE: DType;
    /// Converts to f64 (exact for every dtype but the widest integers).
    fn to_f64(self) -> f64;
    /// Converts from f64, rounding to nearest (saturating for integers).
    fn from_f64(value: f64) -> Self;
}

/// The arithmetic float kernels compute in: f32 for f32 and the half types, f64 for f64.
pub trait Compute: Copy + Send + Sync + PartialOrd + std::fmt::Debug + 'static
where
    Self: std::ops::Add<Output = Self>
        + std::ops::Sub<Output = Self>
        + std::ops::Mul<Output = Self>
        + std::ops::Div<Output = Self>
        + std::ops::Neg<Output = Self>,
{
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// The lowest value (negative infinity).
    const NEG_INFINITY: Self;
    /// Converts from f64.
    fn of(value: f64) -> Self;
    /// Converts to f64.
    fn f64(self) -> f64;
    /// e^self.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// Hyperbolic tangent within 4e-7 (faster in f32; exact to the type's precision in f64).
    fn tanh_approx(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// self^p.
    fn powf(self, p: Self) -> Self;
    /// The larger of two values (NaN-propagating).
    fn max(self, other: Self) -> Self;
}

macro_rules! compute {
    ($t:ty, $exp:path, $tanh:path, $tanh_approx:path) => {
        impl Compute for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            #[inline]
            fn of(value: f64) -> Self {
                value as $t
            }
            #[inline]
            fn f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn exp(self) -> Self {
                $exp(self)
            }
            #[inline]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline]
            fn tanh(self) -> Self {
                $tanh(self)
            }
            #[inline]
            fn tanh_approx(self) -> Self {
                $tanh_approx(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline]
            fn powf(self, p: Self) -> Self {
                <$t>::powf(self, p)
            }
            #[inline]
            fn max(self, other: Self) -> Self {
                if self.is_nan() || self > other {
                    self
                } else {
                    other
                }
            }
        }
    };
}
// f32 (the compute type of f32, f16 and bf16) gets exp and tanh that vectorize; f64 keeps the
// standard library's, as the reference precision.
compute!(
    f32,
    crate::vector_math::exp_f32,
    crate::vector_math::tanh_f32,
    crate::vector_math::tanh_rational_f32
);
compute!(f64, f64::exp, f64::tanh, f64::tanh);

/// A float element type, with the type its kernels compute in.
pub trait Float: Element {
    /// The compute type.
    type C: Compute;
    /// Widens to the compute type.
    fn load(self) -> Self::C;
    /// Narrows from the compute type, rounding to nearest.
    fn store(value: Self::C) -> Self;
}

macro_rules! element {
    ($t:ty, $dtype:expr, $to:expr, $from:expr) => {
        impl Element for $t {
            const DTYPE: DType = $dtype;
            #[inline]
            fn to_f64(self) -> f64 {
                let to: fn($t) -> f64 = $to;
                to(self)
            }
            #[inline]
            fn from_f64(value: f64) -> Self {
                let from: fn(f64) -> $t = $from;
                from(value)
            }
        }
    };
}
element!(f32, DType::F32, |x| x as f64, |v| v as f32);
element!(f64, DType::F64, |x| x, |v| v);
// Half types round from f64 through f32, as PyTorch does and the CUDA kernels do, so that every
// backend stores the same bits (half's own from_f64 rounds bf16 from a truncated value).
element!(f16, DType::F16, |x| x.to_f64(), |v| f16::from_f32(v as f32));
element!(bf16, DType::BF16, |x| x.to_f64(), |v| bf16::from_f32(
    v as f32
));
element!(u32, DType::U32, |x| x as f64, |v| v.round() as u32);
element!(i32, DType::I32, |x| x as f64, |v| v.round() as i32);
element!(u8, DType::U8, |x| x as f64, |v| v.round() as u8);

impl Float for f32 {
    type C = f32;
    #[inline]
    fn load(self) -> f32 {
        self
    }
    #[inline]
    fn store(value: f32) -> Self {
        value
    }
}

impl Float for f64 {
    type C = f64;
    #[inline]
    fn load(self) -> f64 {
        self
    }
    #[inline]
    fn store(value: f64) -> Self {
        value
    }
}

impl Float for f16 {
    type C = f32;
    #[inline]
    fn load(self) -> f32 {
        self.to_f32()
    }
    #[inline]
    fn store(value: f32) -> Self {
        f16::from_f32(value)
    }
}

impl Float for bf16 {
    type C = f32;
    /// Its bits as the top half of an f32's: a shift that vectorizes.
    #[inline]
    fn load(self) -> f32 {
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }
    /// Rounded to nearest even as [`bf16::from_f32`] rounds, without branches, so that it
    /// vectorizes; a NaN stays a NaN, made quiet.
    #[inline]
    fn store(value: f32) -> Self {
        let bits = value.to_bits();
        let rounded = bits.wrapping_add(0x7FFF + ((bits >> 16) & 1)) >> 16;
        let quiet_nan = (bits >> 16) | 0x0040;
        bf16::from_bits(if value.is_nan() { quiet_nan } else { rounded } as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_names_and_conversions() {
        assert_eq!(DType::BF16.size(), 2);
        assert_eq!(DType::F64.to_string(), "f64");
        assert!(DType::F16.is_float() && !DType::U32.is_float());
        assert_eq!(bf16::from_f64(1.5).to_f64(), 1.5);
        // Just above a tie in f32: rounds up, from every source width.
        let above_tie = f32::from_bits(0x3F80_8001);
        assert_eq!(
            <bf16 as Element>::from_f64(above_tie as f64).to_bits(),
            0x3F81
        );
        assert_eq!(bf16::from_f32(above_tie).to_bits(), 0x3F81);
        assert_eq!(u32::from_f64(2.6), 3);
        assert_eq!(u32::from_f64(-1.0), 0, "integer conversion saturates");
        assert_eq!((u8::from_f64(300.0), u8::from_f64(f64::NAN)), (255, 0));
        assert_eq!(
            <f16 as Float>::store(f16::from_f32(0.5).load() * 2.0),
            f16::ONE
        );
        assert!(<f32 as Compute>::max(f32::NAN, 1.0).is_nan());
    }

    #[test]
    fn bf16_loads_and_stores_as_the_half_crate_converts() {
        // Ties to even (down and up), overflow to infinity, a subnormal, a NaN, then a
        // scattered sweep of bit patterns.
        let special = [
            0x3f80_8000,
            0x3f81_8000,
            0x7f7f_ffff,
            0x8000_8001,
            0x7fa0_0001,
        ];
        let sweep = (0..(1u32 << 17)).map(|i| i.wrapping_mul(0x8000_8001).rotate_left(i % 32));
        for bits in special.into_iter().chain(sweep) {
            let value = f32::from_bits(bits);
            let (ours, theirs) = (bf16::store(value), bf16::from_f32(value));
            if value.is_nan() {
                assert!(ours.is_nan() && ours.to_bits() & 0x0040 != 0, "{bits:#x}");
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{bits:#x}");
            }
            let half = bf16::from_bits(bits as u16);
            assert_eq!(half.load().to_bits() >> 16, u32::from(half.to_bits()));
            if !half.is_nan() {
                assert_eq!(half.load(), half.to_f32());
            }
        }
    }
}
