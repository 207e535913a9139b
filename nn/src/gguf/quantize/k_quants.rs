//! The K-quant Q4_K written from f32, as ggml's `quantize_row_q4_K_ref` computes it without an
//! importance matrix: each sub-block of 32 values gets the scale and minimum that minimise its
//! weighted squared error over a small search (`make_qkx2_quants`), then the eight scales and
//! eight minimums are themselves quantized to 6 bits against the super-block's two half-float
//! scales, and the codes are computed again from the quantized scales.
//!
//! Every float operation is ggml's, in its order and in f32 (no fused multiply-adds), so that
//! the bytes are its bytes.

use super::float::f32_to_f16;
use crate::gguf::dequant::f16_to_f32;

/// Values in a super-block.
const QK_K: usize = 256;

/// Values in a sub-block.
const SUB: usize = 32;

/// The largest 4-bit code.
const NMAX: u8 = 15;

/// ggml's `nearest_int`: `v` rounded to the nearest integer (ties to even) through the bits of
/// `v + 1.5 * 2^23`, exact for magnitudes below 2^22.
fn nearest_int(v: f32) -> i32 {
    let shifted = v + 12_582_912.0;
    (shifted.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// `l` clamped to the codes 0 ..= `nmax`.
fn clamp_code(l: i32, nmax: u8) -> u8 {
    l.clamp(0, i32::from(nmax)) as u8
}

/// ggml's `make_qkx2_quants(32, 15, x, weights, L, &the_min, Laux, -1, 0.1, 20, false)`: the
/// codes `codes` and the scale and minimum of `x` (a value is `scale * code - min`), chosen
/// among 21 trial scales by weighted least squares. Returns `(scale, min)`.
fn make_qkx2_quants(x: &[f32], weights: &[f32], codes: &mut [u8]) -> (f32, f32) {
    let (rmin, rdelta, nstep) = (-1.0f32, 0.1f32, 20);
    let nmax = f32::from(NMAX);
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..x.len() {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        codes.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..x.len() {
        codes[i] = clamp_code(nearest_int(iscale * (x[i] - min)), NMAX);
        let diff = scale * f32::from(codes[i]) + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    let mut trial = [0u8; SUB];
    for step in 0..=nstep {
        iscale = (rmin + rdelta * step as f32 + nmax) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..x.len() {
            let l = clamp_code(nearest_int(iscale * (x[i] - min)), NMAX);
            trial[i] = l;
            let (w, l) = (weights[i], f32::from(l));
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut error = 0.0f32;
            for i in 0..x.len() {
                let diff = this_scale * f32::from(trial[i]) + this_min - x[i];
                error += weights[i] * (diff * diff);
            }
            if error < best_error {
                codes[..x.len()].copy_from_slice(&trial[..x.len()]);
                best_error = error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Sub-block `j`'s 6-bit scale and minimum in a Q4_K block's twelve packed bytes (ggml's
/// `get_scale_min_k4`).
fn scale_min(j: usize, q: &[u8; 12]) -> (u8, u8) {
    match j < 4 {
        true => (q[j] & 63, q[j + 4] & 63),
        false => (
            (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        ),
    }
}

/// `block_q4_K {d, dmin, scales[12], qs[128]}` for each super-block of 256 values.
pub(super) fn q4_k(values: &[f32], out: &mut Vec<u8>) {
    for x in values.chunks_exact(QK_K) {
        let mut codes = [0u8; QK_K];
        let (mut scales, mut mins) = ([0.0f32; QK_K / SUB], [0.0f32; QK_K / SUB]);
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for j in 0..QK_K / SUB {
            let sub = &x[SUB * j..SUB * (j + 1)];
            let mut sum_x2 = 0.0f32;
            for &v in sub {
                sum_x2 += v * v;
            }
            let av_x = (sum_x2 / SUB as f32).sqrt();
            let weights: Vec<f32> = sub.iter().map(|v| av_x + v.abs()).collect();
            let (scale, min) = make_qkx2_quants(sub, &weights, &mut codes[SUB * j..SUB * (j + 1)]);
            (scales[j], mins[j]) = (scale, min);
            if scale > max_scale {
                max_scale = scale;
            }
            if min > max_min {
                max_min = min;
            }
        }
        let inv_scale = if max_scale > 0.0 {
            63.0 / max_scale
        } else {
            0.0
        };
        let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
        let mut packed = [0u8; 12];
        for j in 0..QK_K / SUB {
            // ggml stores the int in a uint8_t (modulo 256) before taking the minimum.
            let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
            let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
            if j < 4 {
                packed[j] = ls;
                packed[j + 4] = lm;
            } else {
                packed[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
                packed[j - 4] |= (ls >> 4) << 6;
                packed[j] |= (lm >> 4) << 6;
            }
        }
        let d = f32_to_f16(max_scale / 63.0);
        let dmin = f32_to_f16(max_min / 63.0);
        for j in 0..QK_K / SUB {
            let (sc, m) = scale_min(j, &packed);
            let dj = f16_to_f32(d) * f32::from(sc);
            if dj == 0.0 {
                continue;
            }
            let dm = f16_to_f32(dmin) * f32::from(m);
            for i in SUB * j..SUB * (j + 1) {
                codes[i] = clamp_code(nearest_int((x[i] + dm) / dj), NMAX);
            }
        }
        out.extend_from_slice(&d.to_le_bytes());
        out.extend_from_slice(&dmin.to_le_bytes());
        out.extend_from_slice(&packed);
        for chunk in codes.chunks_exact(64) {
            let (low, high) = chunk.split_at(32);
            out.extend(low.iter().zip(high).map(|(&a, &b)| a | (b << 4)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        for (v, n) in [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (3.49, 3),
            (-7.7, -8),
        ] {
            assert_eq!(nearest_int(v), n, "{v}");
        }
    }
}
