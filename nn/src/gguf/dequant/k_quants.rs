//! ggml's K-quants: super-blocks of 256 values in sub-blocks of 16 or 32, each sub-block with
//! its own scale (and minimum) quantized against the super-block's half-float `d` (and `dmin`),
//! as ggml-common.h lays out `block_q2_K` .. `block_q6_K` and ggml-quants.c's
//! `dequantize_row_q*_K` reads them. Products are formed in the reference's order (the
//! sub-block's scale first, then times the code, then less the minimum), with no fused
//! multiply-add, so the values are the reference's to the bit.

use super::float::f16_at;

/// Values in a super-block (ggml's `QK_K`).
const QK_K: usize = 256;

/// `block_q2_K {scales[16], qs[64], d: f16, dmin: f16}`: 2-bit codes; each byte of `scales`
/// a sub-block of 16's 4-bit scale (low nibble) and minimum (high nibble).
pub(super) fn q2_k(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(84).zip(out.chunks_exact_mut(QK_K)) {
        let (scales, qs) = (&block[..16], &block[16..80]);
        let (d, dmin) = (f16_at(block, 80), f16_at(block, 82));
        // Value `e` is in byte `e / 128 * 32 + e % 32` of qs, at bits `e % 128 / 32 * 2`.
        for (e, y) in y.iter_mut().enumerate() {
            let sc = scales[e / 16];
            let (dl, ml) = (d * f32::from(sc & 0xf), dmin * f32::from(sc >> 4));
            let q = (qs[e / 128 * 32 + e % 32] >> (e % 128 / 32 * 2)) & 3;
            *y = dl * f32::from(q) - ml;
        }
    }
}

/// The signed 6-bit scale of sub-block `i` (of 16) of a Q3_K block: its low four bits in
/// nibbles of bytes 0..8, its high two in bit pairs of bytes 8..12; offset by 32.
fn q3_k_scale(scales: &[u8], i: usize) -> i32 {
    let low = match i < 8 {
        true => scales[i] & 0xf,
        false => scales[i - 8] >> 4,
    };
    let high = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
    i32::from(low | (high << 4)) - 32
}

/// `block_q3_K {hmask[32], qs[64], scales[12], d: f16}`: 3-bit codes, their low two bits laid
/// out as Q2_K's and their third in `hmask` (value `e` at bit `e / 32` of byte `e % 32`; a
/// clear bit subtracts 4), and 6-bit signed scales of sub-blocks of 16.
pub(super) fn q3_k(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(110).zip(out.chunks_exact_mut(QK_K)) {
        let (hmask, qs, scales) = (&block[..32], &block[32..96], &block[96..108]);
        let d = f16_at(block, 108);
        for (e, y) in y.iter_mut().enumerate() {
            let dl = d * q3_k_scale(scales, e / 16) as f32;
            let low = (qs[e / 128 * 32 + e % 32] >> (e % 128 / 32 * 2)) & 3;
            let high = (hmask[e % 32] >> (e / 32)) & 1;
            let q = i32::from(low) - if high == 0 { 4 } else { 0 };
            *y = dl * q as f32;
        }
    }
}

/// The 6-bit scale and minimum of sub-block `j` (of 8) of a Q4_K or Q5_K block (ggml's
/// `get_scale_min_k4`): bytes 0..4 hold the first four scales, 4..8 the first four minimums,
/// each in its low six bits; the last four take their low four bits from the nibbles of bytes
/// 8..12 and their high two from the top bits of the first eight.
fn scale_min_k4(scales: &[u8], j: usize) -> (u8, u8) {
    match j < 4 {
        true => (scales[j] & 63, scales[j + 4] & 63),
        false => (
            (scales[j + 4] & 0xf) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        ),
    }
}

/// The scale and minimum of sub-block `j` of a Q4_K or Q5_K block, as floats.
fn sub_block(d: f32, dmin: f32, scales: &[u8], j: usize) -> (f32, f32) {
    let (sc, m) = scale_min_k4(scales, j);
    (d * f32::from(sc), dmin * f32::from(m))
}

/// `block_q4_K {d: f16, dmin: f16, scales[12], qs[128]}`: 4-bit codes in sub-blocks of 32;
/// each 32 bytes of `qs` hold a pair of sub-blocks, the first in the low nibbles.
pub(super) fn q4_k(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(144).zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
        let (scales, qs) = (&block[4..16], &block[16..144]);
        for (pair, (y, q)) in y.chunks_exact_mut(64).zip(qs.chunks_exact(32)).enumerate() {
            let (d1, m1) = sub_block(d, dmin, scales, 2 * pair);
            let (d2, m2) = sub_block(d, dmin, scales, 2 * pair + 1);
            let (lo, hi) = y.split_at_mut(32);
            for ((lo, hi), &q) in lo.iter_mut().zip(hi).zip(q) {
                *lo = d1 * f32::from(q & 0xf) - m1;
                *hi = d2 * f32::from(q >> 4) - m2;
            }
        }
    }
}

/// `block_q5_K {d: f16, dmin: f16, scales[12], qh[32], qs[128]}`: Q4_K's layout with a fifth
/// bit per code, sub-block `j`'s at bit `j` of each byte of `qh`.
pub(super) fn q5_k(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(176).zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
        let (scales, qh, qs) = (&block[4..16], &block[16..48], &block[48..176]);
        for (pair, (y, q)) in y.chunks_exact_mut(64).zip(qs.chunks_exact(32)).enumerate() {
            let (d1, m1) = sub_block(d, dmin, scales, 2 * pair);
            let (d2, m2) = sub_block(d, dmin, scales, 2 * pair + 1);
            let (lo, hi) = y.split_at_mut(32);
            for (l, ((lo, hi), &q)) in lo.iter_mut().zip(hi).zip(q).enumerate() {
                let h1 = ((qh[l] >> (2 * pair)) & 1) << 4;
                let h2 = ((qh[l] >> (2 * pair + 1)) & 1) << 4;
                *lo = d1 * f32::from((q & 0xf) + h1) - m1;
                *hi = d2 * f32::from((q >> 4) + h2) - m2;
            }
        }
    }
}

/// `block_q6_K {ql[128], qh[64], scales[16]: i8, d: f16}`: 6-bit codes offset by 32 in
/// sub-blocks of 16. Each half of 128 values takes 64 bytes of `ql` (values `l` and `l + 64`
/// in the low and high nibbles of byte `l`, `l + 32` and `l + 96` in those of byte `l + 32`)
/// and 32 of `qh` (their high bit pairs, in that order from the low bits of byte `l`).
pub(super) fn q6_k(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(210).zip(out.chunks_exact_mut(QK_K)) {
        let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
        let d = f16_at(block, 208);
        for half in 0..2 {
            let (ql, qh) = (
                &ql[64 * half..64 * half + 64],
                &qh[32 * half..32 * half + 32],
            );
            let sc = |k: usize, l: usize| d * f32::from(scales[8 * half + 2 * k + l / 16] as i8);
            let y = &mut y[128 * half..128 * half + 128];
            for l in 0..32 {
                let codes = [
                    (ql[l] & 0xf) | (qh[l] & 3) << 4,
                    (ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4,
                    (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4,
                    (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4,
                ];
                for (k, q) in codes.into_iter().enumerate() {
                    y[32 * k + l] = sc(k, l) * (i32::from(q) - 32) as f32;
                }
            }
        }
    }
}
