//! The plain float types written from f32: F32 as it is, F16 and BF16 rounded to the nearest
//! (ties to even), as numpy's `astype(float16)` and ggml's `ggml_compute_fp32_to_bf16` round.

/// The IEEE half-float bits nearest `v` (ties to even; past the largest, an infinity).
pub(crate) fn f32_to_f16(v: f32) -> u16 {
    half::f16::from_f32(v).to_bits()
}

/// The bfloat16 bits nearest `v` (ties to even), a NaN made quiet, as ggml rounds them.
fn f32_to_bf16(v: f32) -> u16 {
    let mut bits = v.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        bits = (bits & 0xffff_0000) | (64 << 16);
    }
    ((u64::from(bits) + 0x7fff + u64::from((bits >> 16) & 1)) >> 16) as u16
}

/// Little-endian f32s.
pub(super) fn f32s(values: &[f32], out: &mut Vec<u8>) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Little-endian half floats.
pub(super) fn f16s(values: &[f32], out: &mut Vec<u8>) {
    for &v in values {
        out.extend_from_slice(&f32_to_f16(v).to_le_bytes());
    }
}

/// Little-endian bfloat16s.
pub(super) fn bf16s(values: &[f32], out: &mut Vec<u8>) {
    for &v in values {
        out.extend_from_slice(&f32_to_bf16(v).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bfloat16_rounds_to_nearest_even_and_quiets_nans() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // Halfway between 0x3f80 and 0x3f81: to the even one; just above: up.
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80);
        assert_eq!(f32_to_bf16(f32::NEG_INFINITY), 0xff80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(f32_to_f16(65520.0), 0x7c00);
        assert_eq!(f32_to_f16(-0.0), 0x8000);
    }
}
