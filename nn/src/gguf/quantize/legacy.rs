//! ggml's blocks of 32 values written from f32, as `quantize_row_q8_0_ref`,
//! `quantize_row_q4_0_ref` and `quantize_row_q5_0_ref` compute them: a half-float scale `d`,
//! then each value's code, `x / d` rounded.

use super::float::f32_to_f16;

/// Values in a block.
const QK: usize = 32;

/// The value of largest magnitude in `block`, the first of them on ties, with its sign.
fn signed_max(block: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in block {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// The reciprocal of a scale, 0 for a zero scale.
fn inverse(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

/// `block_q8_0 {d, qs[32]}`: `d` is the largest magnitude over 127, each code `x / d`
/// rounded half away from zero.
pub(super) fn q8_0(values: &[f32], out: &mut Vec<u8>) {
    for block in values.chunks_exact(QK) {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = inverse(d);
        out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
        out.extend(block.iter().map(|&x| (x * id).round() as i8 as u8));
    }
}

/// `block_q4_0 {d, qs[16]}`: `d` is the value of largest magnitude over -8, each code
/// `x / d + 8` truncated (at most 15), the block's first 16 codes in the low nibbles.
pub(super) fn q4_0(values: &[f32], out: &mut Vec<u8>) {
    for block in values.chunks_exact(QK) {
        let d = signed_max(block) / -8.0;
        let id = inverse(d);
        out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
        let code = |x: f32| ((x * id + 8.5) as i8).min(15) as u8;
        let (low, high) = block.split_at(QK / 2);
        out.extend(
            low.iter()
                .zip(high)
                .map(|(&a, &b)| code(a) | (code(b) << 4)),
        );
    }
}

/// `block_q5_0 {d, qh[4], qs[16]}`: `d` is the value of largest magnitude over -16, each code
/// `x / d + 16` truncated (at most 31); the low nibbles as Q4_0's, the fifth bits in `qh`
/// (bit `j` of the little-endian word is code `j`'s).
pub(super) fn q5_0(values: &[f32], out: &mut Vec<u8>) {
    for block in values.chunks_exact(QK) {
        let d = signed_max(block) / -16.0;
        let id = inverse(d);
        let codes: Vec<u8> = block
            .iter()
            .map(|&x| ((x * id + 16.5) as i8).min(31) as u8)
            .collect();
        let qh = codes
            .iter()
            .enumerate()
            .fold(0u32, |qh, (j, &q)| qh | (u32::from(q >> 4) << j));
        out.extend_from_slice(&f32_to_f16(d).to_le_bytes());
        out.extend_from_slice(&qh.to_le_bytes());
        let (low, high) = codes.split_at(QK / 2);
        out.extend(
            low.iter()
                .zip(high)
                .map(|(&a, &b)| (a & 0xf) | ((b & 0xf) << 4)),
        );
    }
}
