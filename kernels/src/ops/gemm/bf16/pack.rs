//! Operands in pairs along the inner dimension, the layout both bf16 kernels multiply: two bf16
//! values in one 32-bit word, the first in the low half (the order `VDPBF16PS` and
//! `TDPBF16PS` pair the lanes of both operands in).

use std::ops::Range;

use half::bf16;

use super::NR;
#[cfg(target_arch = "x86_64")]
use crate::ops::elementwise::isa::has_avx512;
use crate::ops::gemm::kernels::GemmSpec;

/// Two bf16 values as one 32-bit pair, the first in the low half.
#[inline(always)]
pub(super) fn pair(first: bf16, second: bf16) -> u32 {
    u32::from(first.to_bits()) | (u32::from(second.to_bits()) << 16)
}

/// The pairs of one line of inner elements (`k` long) into every `stride`-th slot of `packed`,
/// the last pair's second half zero when `k` is odd.
#[inline(always)]
pub(super) fn pack_line(line: &[bf16], packed: &mut [u32], stride: usize) {
    for (two, slot) in line.chunks(2).zip(packed.iter_mut().step_by(stride)) {
        *slot = pair(two[0], two.get(1).copied().unwrap_or(bf16::ZERO));
    }
}

/// The pairs of two rows of inner elements `2p` and `2p + 1` (`hi` absent past an odd `k`)
/// into consecutive slots.
#[inline(always)]
pub(super) fn pack_rows(lo: &[bf16], hi: Option<&[bf16]>, packed: &mut [u32]) {
    match hi {
        Some(hi) => (packed.iter_mut().zip(lo.iter().zip(hi)))
            .for_each(|(slot, (&lo, &hi))| *slot = pair(lo, hi)),
        None => (packed.iter_mut().zip(lo)).for_each(|(slot, &lo)| *slot = pair(lo, bf16::ZERO)),
    }
}

/// Panel `q` of `op(b)` (columns `q * NR ..`) over the inner elements `inner` as
/// `[pairs][NR]`: each column's inner elements `inner.start + 2p` and the next in pair `p`,
/// zeros past the matrix's edges and in the pairs the panel holds beyond `inner`'s.
pub(super) fn pack_b(
    spec: &GemmSpec,
    b: &[bf16],
    inner: Range<usize>,
    q: usize,
    panel: &mut [u32],
) {
    let &GemmSpec { n, k, .. } = spec;
    let (first, columns) = (q * NR, NR.min(n - q * NR));
    let (start, len) = (inner.start, inner.len());
    let (panel, padding) = panel.split_at_mut(len.div_ceil(2) * NR);
    padding.fill(0);
    if columns < NR {
        panel.fill(0);
    }
    if spec.trans_b {
        // Column `c` is row `first + c` of `b`, its pairs consecutive: a transpose of pairs.
        let line = |c: usize| &b[(first + c) * k + start..][..len];
        let (whole_columns, whole_pairs) = transposed_blocks(columns, len, line, panel, NR);
        for c in 0..columns {
            let skip = if c < whole_columns { whole_pairs } else { 0 };
            if 2 * skip < len {
                pack_line(&line(c)[2 * skip..], &mut panel[skip * NR + c..], NR);
            }
        }
    } else {
        let b = &b[start * n..];
        let whole = if columns == NR {
            interleaved_rows(b, n, first, len, panel)
        } else {
            0
        };
        for (p, slots) in panel.chunks_exact_mut(NR).enumerate().skip(whole) {
            let row = |kk: usize| (kk < len).then(|| &b[kk * n + first..][..columns]);
            pack_rows(&b[2 * p * n + first..][..columns], row(2 * p + 1), slots);
        }
    }
}

/// Packs the whole pairs of a whole panel of an untransposed `op(b)` (`b` stored `[k][n]`,
/// the panel's columns `first .. first + NR`): rows `2p` and `2p + 1` interleaved into pair
/// row `p`. Says how many pair rows it packed; none where the CPU lacks AVX-512.
fn interleaved_rows(b: &[bf16], n: usize, first: usize, k: usize, panel: &mut [u32]) -> usize {
    let whole = k / 2;
    #[cfg(target_arch = "x86_64")]
    if whole > 0 && has_avx512() {
        assert!(
            (2 * whole - 1) * n + first + NR <= b.len() && whole * NR <= panel.len(),
            "a panel's pairs lie outside their operands"
        );
        // SAFETY: the CPU has AVX-512F, checked above; every row read and pair row written
        // lies within `b` and `panel`, asserted above.
        unsafe { interleave_rows(b, n, first, whole, panel) };
        return whole;
    }
    0
}

/// [`interleaved_rows`]' pairs, 16 columns at a time.
///
/// # Safety
/// The CPU must support AVX-512F, and `b` and `panel` must hold the rows and pair rows named.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn interleave_rows(b: &[bf16], n: usize, first: usize, whole: usize, panel: &mut [u32]) {
    use std::arch::x86_64::*;
    let (b, out) = (b.as_ptr(), panel.as_mut_ptr());
    for p in 0..whole {
        for half in [0, 16] {
            // SAFETY: rows `2p` and `2p + 1` hold columns `first + half ..` plus 16, and pair
            // row `p` its 16 slots from `half` (the caller's promise); unaligned accesses.
            unsafe {
                let lo = b.add(2 * p * n + first + half);
                let pairs = pairs16(lo, lo.add(n));
                _mm512_storeu_si512(out.add(p * NR + half).cast(), pairs);
            }
        }
    }
}

/// The 16 pairs of 16 bf16 values from `lo` and 16 from `hi`: `lo[i]` in the low half of
/// lane `i`, `hi[i]` in its high half.
///
/// # Safety
/// The CPU must support AVX-512F, and `lo` and `hi` must each point at 16 readable values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn pairs16(lo: *const bf16, hi: *const bf16) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    // SAFETY: 32 bytes readable at each (the caller's promise); unaligned loads.
    let (lo, hi) = unsafe { (_mm256_loadu_si256(lo.cast()), _mm256_loadu_si256(hi.cast())) };
    let (lo, hi) = (_mm512_cvtepu16_epi32(lo), _mm512_cvtepu16_epi32(hi));
    _mm512_or_si512(lo, _mm512_slli_epi32::<16>(hi))
}

/// Packs whole blocks of 16 lines by 16 pairs transposed: pair `p` of `line(i)` into slot
/// `p * stride + i` of `packed`, for the first `lines` lines (`k` inner elements each) as far
/// as whole blocks reach, and says how far: `(lines, pairs)` covered, none where the CPU lacks
/// AVX-512.
pub(super) fn transposed_blocks<'a>(
    lines: usize,
    k: usize,
    line: impl Fn(usize) -> &'a [bf16],
    packed: &mut [u32],
    stride: usize,
) -> (usize, usize) {
    let (whole_lines, whole_pairs) = (lines / 16 * 16, k / 32 * 16);
    #[cfg(target_arch = "x86_64")]
    if whole_lines * whole_pairs > 0 && has_avx512() {
        for first in (0..whole_lines).step_by(16) {
            let rows: [&[bf16]; 16] = std::array::from_fn(|i| &line(first + i)[..2 * whole_pairs]);
            // SAFETY: the CPU has AVX-512F, checked just above.
            unsafe { transpose_lines(&rows, &mut packed[first..], stride) };
        }
        return (whole_lines, whole_pairs);
    }
    (0, 0)
}

/// Pair `p` of `rows[i]` (each of whole blocks of 16 pairs) into slot `p * stride + i` of
/// `packed`, 16 x 16 pairs at a time.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_lines(rows: &[&[bf16]; 16], packed: &mut [u32], stride: usize) {
    use std::arch::x86_64::*;
    let pairs = rows[0].len() / 2;
    assert!(
        rows.iter().all(|row| row.len() == 2 * pairs)
            && pairs.is_multiple_of(16)
            && (pairs == 0 || (pairs - 1) * stride + 16 <= packed.len()),
        "transposed pairs lie outside their operands"
    );
    for block in (0..pairs).step_by(16) {
        // SAFETY: each row holds pairs `block .. block + 16` (asserted above): 64 bytes,
        // loaded unaligned.
        let lines = std::array::from_fn(|i| unsafe {
            _mm512_loadu_si512(rows[i].as_ptr().add(2 * block).cast())
        });
        for (j, column) in transpose16(lines).iter().enumerate() {
            // SAFETY: slots `(block + j) * stride ..` plus 16 lie within `packed` (asserted
            // above); an unaligned store.
            unsafe {
                _mm512_storeu_si512(
                    packed.as_mut_ptr().add((block + j) * stride).cast(),
                    *column,
                )
            };
        }
    }
}

/// A 16 x 16 matrix of 32-bit values transposed: `out[j]` lane `i` is `rows[i]` lane `j`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) fn transpose16(
    rows: [std::arch::x86_64::__m512i; 16],
) -> [std::arch::x86_64::__m512i; 16] {
    use std::arch::x86_64::*;
    // Within each 128-bit lane: pairs of rows interleaved, then fours.
    let t: [__m512i; 16] = std::array::from_fn(|i| {
        let (x, y) = (rows[i / 2 * 2], rows[i / 2 * 2 + 1]);
        if i % 2 == 0 {
            _mm512_unpacklo_epi32(x, y)
        } else {
            _mm512_unpackhi_epi32(x, y)
        }
    });
    // u[4g + j], lane L: rows 4g .. 4g + 4 at column 4L + j.
    let u: [__m512i; 16] = std::array::from_fn(|i| {
        let (g, j) = (i / 4, i % 4);
        let (x, y) = (t[4 * g + j / 2], t[4 * g + 2 + j / 2]);
        if j % 2 == 0 {
            _mm512_unpacklo_epi64(x, y)
        } else {
            _mm512_unpackhi_epi64(x, y)
        }
    });
    // Column 4L + j gathers lane L of u[j], u[4 + j], u[8 + j] and u[12 + j].
    let mut out = [_mm512_setzero_si512(); 16];
    for j in 0..4 {
        let (low_01, high_01) = (
            _mm512_shuffle_i32x4::<0x44>(u[j], u[4 + j]),
            _mm512_shuffle_i32x4::<0x44>(u[8 + j], u[12 + j]),
        );
        let (low_23, high_23) = (
            _mm512_shuffle_i32x4::<0xEE>(u[j], u[4 + j]),
            _mm512_shuffle_i32x4::<0xEE>(u[8 + j], u[12 + j]),
        );
        out[j] = _mm512_shuffle_i32x4::<0x88>(low_01, high_01);
        out[4 + j] = _mm512_shuffle_i32x4::<0xDD>(low_01, high_01);
        out[8 + j] = _mm512_shuffle_i32x4::<0x88>(low_23, high_23);
        out[12 + j] = _mm512_shuffle_i32x4::<0xDD>(low_23, high_23);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::values;
    use super::*;

    #[test]
    fn whole_blocks_transpose_as_pairs_are_packed_one_by_one() {
        // 37 lines of 70 elements: two blocks of lines, two of pairs, and edges past both.
        let (lines, k, stride) = (37, 70, 40);
        let data = values(lines * k, 3);
        let line = |i: usize| &data[i * k..][..k];
        let mut fast = vec![0u32; k.div_ceil(2) * stride];
        let (whole_lines, whole_pairs) = transposed_blocks(lines, k, line, &mut fast, stride);
        let mut slow = vec![0u32; fast.len()];
        for i in 0..lines {
            pack_line(line(i), &mut slow[i..], stride);
            let skip = if i < whole_lines { whole_pairs } else { 0 };
            pack_line(&line(i)[2 * skip..], &mut fast[skip * stride + i..], stride);
        }
        assert_eq!(fast, slow);
        #[cfg(target_arch = "x86_64")]
        if has_avx512() {
            assert_eq!((whole_lines, whole_pairs), (32, 32));
        }
    }
}
