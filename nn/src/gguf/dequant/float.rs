//! The unquantized float types: F32, F16 and BF16, each value converted exactly.

/// The float of IEEE half-float bits `h`, exactly (a NaN keeps its payload).
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    match exp {
        // Zero or subnormal: man * 2^-24, exact in f32.
        0 => f32::from_bits(sign | (man as f32 * f32::from_bits(0x3380_0000)).to_bits()),
        0x1f => f32::from_bits(sign | 0x7f80_0000 | (man << 13)),
        _ => f32::from_bits(sign | ((exp + 127 - 15) << 23) | (man << 13)),
    }
}

/// The half float at `at` of `bytes` (little-endian).
pub(super) fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([bytes[at], bytes[at + 1]]))
}

/// Little-endian f32s.
pub(super) fn f32s(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(4).zip(out) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// Little-endian half floats.
pub(super) fn f16s(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(2).zip(out) {
        *y = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

/// Little-endian bfloat16s: the high half of an f32's bits.
pub(super) fn bf16s(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(2).zip(out) {
        *y = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_half_float_converts_as_the_half_crate_does() {
        for bits in 0..=u16::MAX {
            let ours = f16_to_f32(bits);
            let theirs = half::f16::from_bits(bits).to_f32();
            match theirs.is_nan() {
                // A NaN keeps its sign and payload (the half crate may set the quiet bit).
                true => assert_eq!(ours.to_bits() | 0x0040_0000, theirs.to_bits() | 0x0040_0000),
                false => assert_eq!(ours.to_bits(), theirs.to_bits(), "{bits:#06x}"),
            }
        }
        assert_eq!(f16_to_f32(0x7c01).to_bits(), 0x7f80_2000);
    }
}
