//! ggml's first quantizations, blocks of 32 values (ggml-common.h's `block_q4_0` ..
//! `block_q8_0`): a half-float scale `d` (and a minimum `m` for the `_1` types), then the codes.
//! A value is `d * q` or `d * q + m`, as ggml-quants.c's `dequantize_row_*` compute it.

use super::float::f16_at;

/// Values in a block.
const QK: usize = 32;

/// `block_q4_0 {d: f16, qs[16]}`: 4-bit codes offset by 8, the block's first 16 values in the
/// low nibbles, its last 16 in the high ones.
pub(super) fn q4_0(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(2 + QK / 2).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(block, 0);
        for (j, &q) in block[2..].iter().enumerate() {
            y[j] = (i32::from(q & 0xf) - 8) as f32 * d;
            y[j + QK / 2] = (i32::from(q >> 4) - 8) as f32 * d;
        }
    }
}

/// `block_q4_1 {d: f16, m: f16, qs[16]}`: 4-bit codes, laid out as Q4_0's.
pub(super) fn q4_1(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(4 + QK / 2).zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (f16_at(block, 0), f16_at(block, 2));
        for (j, &q) in block[4..].iter().enumerate() {
            y[j] = f32::from(q & 0xf) * d + m;
            y[j + QK / 2] = f32::from(q >> 4) * d + m;
        }
    }
}

/// The fifth bits of a 5-bit block's codes: bit `j` of the little-endian `qh` is code `j`'s.
fn high_bits(qh: &[u8]) -> u32 {
    u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]])
}

/// Code `j` and code `j + 16` of a 5-bit block, from their low nibbles in `q` and `qh`.
fn codes5(q: u8, qh: u32, j: usize) -> (u8, u8) {
    let hi0 = ((qh >> j) & 1) as u8;
    let hi1 = ((qh >> (j + QK / 2)) & 1) as u8;
    ((q & 0xf) | (hi0 << 4), (q >> 4) | (hi1 << 4))
}

/// `block_q5_0 {d: f16, qh[4], qs[16]}`: 5-bit codes offset by 16.
pub(super) fn q5_0(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(6 + QK / 2).zip(out.chunks_exact_mut(QK)) {
        let (d, qh) = (f16_at(block, 0), high_bits(&block[2..6]));
        for (j, &q) in block[6..].iter().enumerate() {
            let (x0, x1) = codes5(q, qh, j);
            y[j] = (i32::from(x0) - 16) as f32 * d;
            y[j + QK / 2] = (i32::from(x1) - 16) as f32 * d;
        }
    }
}

/// `block_q5_1 {d: f16, m: f16, qh[4], qs[16]}`: 5-bit codes.
pub(super) fn q5_1(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(8 + QK / 2).zip(out.chunks_exact_mut(QK)) {
        let (d, m, qh) = (f16_at(block, 0), f16_at(block, 2), high_bits(&block[4..8]));
        for (j, &q) in block[8..].iter().enumerate() {
            let (x0, x1) = codes5(q, qh, j);
            y[j] = f32::from(x0) * d + m;
            y[j + QK / 2] = f32::from(x1) * d + m;
        }
    }
}

/// `block_q8_0 {d: f16, qs[32]: i8}`.
pub(super) fn q8_0(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(2 + QK).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(block, 0);
        for (y, &q) in y.iter_mut().zip(&block[2..]) {
            *y = f32::from(q as i8) * d;
        }
    }
}
