//! A few rows against a weight stored in NF4, on the CPU (a QLoRA base's linear layer while
//! generating): each weight row decoded from its codes into cache as the product reads it, as
//! dequantizing into the product's dtype would give it, then multiplied as the product of a few
//! rows against a dense weight multiplies, so the result is the same to the bit and the weight
//! is read as stored, about a quarter of its bf16 bytes.

use std::ops::Range;

use super::kernels::{Nf4ProductOperands, Nf4ProductSpec};
use crate::dtype::Float;
use crate::error::Result;
use crate::ops::gemm::few_rows::{WeightRow, dot, few_rows_with};
use crate::quantize::nf4::LEVELS;

/// `out = x @ w^T` for `spec`, `x` and `out` of type `T`.
pub(super) fn nf4_few_rows<T: WeightRow + Float<C = f32>>(
    spec: &Nf4ProductSpec,
    operands: Nf4ProductOperands<'_>,
) -> Result<()> {
    const OP: &str = "nf4_few_rows";
    let Nf4ProductOperands {
        x,
        codes,
        scales,
        out,
    } = operands;
    let (codes, scales) = (codes.host::<u8>(OP)?, scales.host::<f32>(OP)?);
    let weight = Nf4Rows {
        codes,
        scales,
        k: spec.k,
        block: spec.block,
    };
    few_rows_with::<T>(&spec.as_product(), x, out, |x, rows, row| {
        products_best_isa::<T>(x, &weight, rows, row)
    })
}

/// A weight's NF4 codes and block scales, `k` values a row in blocks of `block`.
struct Nf4Rows<'a> {
    codes: &'a [u8],
    scales: &'a [f32],
    k: usize,
    block: usize,
}

impl Nf4Rows<'_> {
    /// Row `j`'s values into `row`, a block at a time by `decode`: each level times its block's
    /// scale, rounded to `T` and widened back, as dequantizing into `T` gives them.
    #[inline(always)]
    fn decode<T: Float<C = f32>>(&self, j: usize, row: &mut [f32], decode: impl DecodeBlock) {
        let (k, block) = (self.k, self.block);
        let codes = &self.codes[j * k / 2..(j + 1) * k / 2];
        let scales = &self.scales[j * k / block..(j + 1) * k / block];
        for ((values, codes), &scale) in row
            .chunks_exact_mut(block)
            .zip(codes.chunks_exact(block / 2))
            .zip(scales)
        {
            // The block's 16 values, each rounded once: then a value is a lookup.
            decode(
                &LEVELS.map(|level| T::store(level * scale).load()),
                codes,
                values,
            );
        }
    }
}

/// Writes a block's `values` from its `codes` (two a byte, the first in the high nibble), each
/// the entry of `table` (the block's 16 values) that its code names.
trait DecodeBlock: Fn(&[f32; 16], &[u8], &mut [f32]) + Copy {}

impl<F: Fn(&[f32; 16], &[u8], &mut [f32]) + Copy> DecodeBlock for F {}

/// [`DecodeBlock`] a byte at a time (an odd count of values ends on a high nibble).
#[inline(always)]
pub(super) fn decode_block(table: &[f32; 16], codes: &[u8], values: &mut [f32]) {
    for (pair, &byte) in values.chunks_mut(2).zip(codes) {
        pair[0] = table[usize::from(byte >> 4)];
        if let Some(low) = pair.get_mut(1) {
            *low = table[usize::from(byte & 0x0F)];
        }
    }
}

/// [`DecodeBlock`] eight values at a time: four bytes' nibbles shifted into eight lanes, each
/// looked up in the table's two halves (held in registers) and the half its top bit names kept.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn decode_block_avx2(table: &[f32; 16], codes: &[u8], values: &mut [f32]) {
    use std::arch::x86_64::*;
    let lanes = values.len().min(codes.len() * 2) / 8 * 8;
    // SAFETY: the loads read 8 of `table`'s 16 values from its start and its middle; each step
    // reads 4 bytes of `codes` at `i / 2` and writes 8 values at `i`, with `i + 8 <= lanes`, so
    // both stay within their slices; the rest are the intrinsics' register operations.
    unsafe {
        let low = _mm256_loadu_ps(table.as_ptr());
        let high = _mm256_loadu_ps(table.as_ptr().add(8));
        // Value 2b is byte b's high nibble, value 2b + 1 its low one (little-endian words).
        let shifts = _mm256_setr_epi32(4, 0, 12, 8, 20, 16, 28, 24);
        let nibble = _mm256_set1_epi32(0x0F);
        for i in (0..lanes).step_by(8) {
            let word = codes.as_ptr().add(i / 2).cast::<i32>().read_unaligned();
            let index =
                _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(word), shifts), nibble);
            let from_low = _mm256_permutevar8x32_ps(low, index);
            let from_high = _mm256_permutevar8x32_ps(high, index);
            let upper = _mm256_castsi256_ps(_mm256_slli_epi32::<28>(index));
            let picked = _mm256_blendv_ps(from_low, from_high, upper);
            _mm256_storeu_ps(values.as_mut_ptr().add(i), picked);
        }
    }
    decode_block(table, &codes[lanes / 2..], &mut values[lanes..]);
}

/// The products of the rows of `x` (`[m, k]`) with the weight's rows `rows`, as `[w, m]`, each
/// weight row decoded into `row` first by `decode`.
#[inline(always)]
fn products<T: Float<C = f32>>(
    x: &[f32],
    weight: &Nf4Rows<'_>,
    rows: Range<usize>,
    row: &mut [f32],
    decode: impl DecodeBlock,
) -> Vec<f32> {
    let m = x.len() / weight.k;
    let mut sums = vec![0f32; rows.len() * m];
    for (j, sums) in rows.zip(sums.chunks_exact_mut(m)) {
        weight.decode::<T>(j, row, decode);
        for (sum, x) in sums.iter_mut().zip(x.chunks_exact(weight.k)) {
            *sum = dot(x, row, |w| w);
        }
    }
    sums
}

/// [`products`] compiled for AVX2 and FMA, decoding eight values at a time.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn products_avx2<T: Float<C = f32>>(
    x: &[f32],
    weight: &Nf4Rows<'_>,
    rows: Range<usize>,
    row: &mut [f32],
) -> Vec<f32> {
    // SAFETY: this function's caller has checked that the CPU supports AVX2.
    let decode = |table: &[f32; 16], codes: &[u8], values: &mut [f32]| unsafe {
        decode_block_avx2(table, codes, values)
    };
    products::<T>(x, weight, rows, row, decode)
}

/// [`products`] in the widest instruction set this CPU has.
fn products_best_isa<T: Float<C = f32>>(
    x: &[f32],
    weight: &Nf4Rows<'_>,
    rows: Range<usize>,
    row: &mut [f32],
) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    if crate::ops::elementwise::isa::has_avx2() {
        // SAFETY: the CPU supports AVX2 and FMA, checked just above.
        return unsafe { products_avx2::<T>(x, weight, rows, row) };
    }
    products::<T>(x, weight, rows, row, decode_block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_lanes_at_a_time_decode_as_a_byte_at_a_time() {
        let table: [f32; 16] = std::array::from_fn(|i| i as f32 * 1.5 - 7.0);
        let codes: Vec<u8> = (0..37u32).map(|i| (i * 97 + 13) as u8).collect();
        // Whole groups of eight, and tails of even and odd lengths (an array's last block).
        for len in [64, 8, 7, 6, 2, 1, 0, 74] {
            let mut want = vec![0f32; len];
            decode_block(&table, &codes, &mut want);
            #[cfg(target_arch = "x86_64")]
            if crate::ops::elementwise::isa::has_avx2() {
                let mut got = vec![f32::NAN; len];
                // SAFETY: the CPU supports AVX2, checked just above.
                unsafe { decode_block_avx2(&table, &codes, &mut got) };
                assert_eq!(got, want, "{len} values");
            }
            let firsts: Vec<f32> = codes.iter().map(|&b| table[usize::from(b >> 4)]).collect();
            assert!(want.iter().step_by(2).zip(&firsts).all(|(w, f)| w == f));
        }
    }
}
