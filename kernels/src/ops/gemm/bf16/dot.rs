//! bf16 products on AVX512-BF16's `VDPBF16PS` (16 f32 sums, each gaining the products of one
//! pair of bf16 values), twice the rate of f32 FMAs and with no widened copy of either operand:
//! tiles of [`MR`] x [`NR`] sums held in registers. `op(a)` is read as stored where its rows
//! hold whole pairs, packed whole in tiles of [`MR`] rows otherwise.

use half::bf16;

use super::pack::{pack_line, pack_rows};
use super::{BLOCK_BYTES, NR, each_block, each_chunk, write_sums};
use crate::dtype::Float;
use crate::ops::gemm::kernels::GemmSpec;

/// Output rows of a tile: each inner pair of a row is broadcast against a panel.
const MR: usize = 12;

/// Whether this CPU has AVX-512F and AVX512-BF16.
pub(super) fn detected() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Where the packed operands of one product lie.
pub(super) struct Layout {
    /// Inner pairs: the inner dimension halved, rounded up.
    pairs: usize,
    /// Tiles of [`MR`] output rows.
    tiles: usize,
    /// Panels of [`NR`] columns of `op(b)`.
    panels: usize,
    /// Panels packed at once.
    per_block: usize,
    /// Whether `op(a)` is read as stored: untransposed rows of whole pairs (an even inner
    /// dimension), each pair one 32-bit load.
    direct: bool,
}

impl Layout {
    pub(super) fn of(spec: &GemmSpec) -> Self {
        let pairs = spec.k.div_ceil(2);
        let panels = spec.n.div_ceil(NR);
        Layout {
            pairs,
            tiles: spec.m.div_ceil(MR),
            panels,
            per_block: (BLOCK_BYTES / (pairs * NR * 4).max(1)).clamp(1, panels.max(1)),
            direct: !spec.trans_a && spec.k.is_multiple_of(2),
        }
    }

    fn a_words(&self) -> usize {
        if self.direct {
            0
        } else {
            self.tiles * self.pairs * MR
        }
    }

    fn block_words(&self) -> usize {
        self.per_block * self.pairs * NR
    }

    /// Pairs one product packs: `op(a)` (unless it is read as stored) and every panel of
    /// `op(b)`.
    pub(super) fn packed(&self) -> usize {
        self.a_words() + self.panels * self.pairs * NR
    }

    /// Scratch words of one product: the packed `op(a)` and one packed block of `op(b)`.
    pub(super) fn words(&self) -> usize {
        self.a_words() + self.block_words()
    }
}

/// One product of `spec`'s geometry: `op(a)` packed whole (unless it is read as stored),
/// `op(b)` a block of panels at a time, then every tile of [`MR`] output rows against the
/// block (a parallel task each when `parallel`).
pub(super) fn matrix<O: Float<C = f32>>(
    spec: &GemmSpec,
    a: &[bf16],
    b: &[bf16],
    out: &mut [O],
    scratch: &mut [u32],
    parallel: bool,
) {
    let layout = Layout::of(spec);
    let &Layout {
        pairs, per_block, ..
    } = &layout;
    let n = spec.n;
    let (packed_a, packed_b) = scratch.split_at_mut(layout.a_words());
    each_chunk(packed_a, pairs * MR, parallel, |t, tile| {
        pack_a(spec, a, t * MR, tile)
    });
    let packed_a = &*packed_a;
    each_block(
        spec,
        b,
        0..spec.k,
        (pairs, per_block),
        packed_b,
        parallel,
        |first, block| {
            each_chunk(out, MR * n, parallel, |t, rows| {
                let tile = if layout.direct {
                    // Rows past the matrix's edge read its last row; their sums are not written.
                    let row = |r: usize| (t * MR + r).min(spec.m - 1) * spec.k;
                    Tile {
                        data: a,
                        rows: std::array::from_fn(row),
                        step: 2,
                    }
                } else {
                    Tile {
                        data: bytemuck::cast_slice(&packed_a[t * pairs * MR..][..pairs * MR]),
                        rows: std::array::from_fn(|r| 2 * r),
                        step: 2 * MR,
                    }
                };
                for (q, panel) in block.chunks_exact(pairs * NR).enumerate() {
                    let sums = tile_sums(&tile, panel);
                    write_sums(&sums, rows, NR, (first + q) * NR, n, spec.accumulate);
                }
            });
        },
    );
}

/// Rows `first ..` of `op(a)` as `[pairs][MR]`, zeros past the matrix's edges.
fn pack_a(spec: &GemmSpec, a: &[bf16], first: usize, packed: &mut [u32]) {
    let &GemmSpec { m, k, .. } = spec;
    let rows = MR.min(m - first);
    if rows < MR {
        packed.fill(0);
    }
    if spec.trans_a {
        for (p, slots) in packed.chunks_exact_mut(MR).enumerate() {
            let row = |kk: usize| (kk < k).then(|| &a[kk * m + first..][..rows]);
            pack_rows(&a[2 * p * m + first..][..rows], row(2 * p + 1), slots);
        }
    } else {
        for r in 0..rows {
            pack_line(&a[(first + r) * k..][..k], &mut packed[r..], MR);
        }
    }
}

/// A tile of [`MR`] rows of `op(a)` in pairs: pair `p` of row `r` is the two bf16 values of
/// `data` from `rows[r] + p * step`.
struct Tile<'a> {
    data: &'a [bf16],
    rows: [usize; MR],
    step: usize,
}

impl Tile<'_> {
    /// Whether every pair of `pairs` lies within `data` (what the kernels' reads rely on).
    fn holds(&self, pairs: usize) -> bool {
        let last = |row: usize| row + pairs.saturating_sub(1) * self.step + 2;
        pairs == 0 || self.rows.iter().all(|&row| last(row) <= self.data.len())
    }

    /// Pair `p` of row `r`, the first value in the low half.
    ///
    /// # Safety
    /// `p` is below the pairs that [`Tile::holds`] checked.
    #[inline(always)]
    unsafe fn pair(&self, r: usize, p: usize) -> u32 {
        // SAFETY: `holds` checked that both values lie within `data`; a 32-bit read of two
        // 16-bit values need not be aligned.
        unsafe {
            (self.data.as_ptr().add(self.rows[r] + p * self.step))
                .cast::<u32>()
                .read_unaligned()
        }
    }
}

/// The [`MR`] x [`NR`] sums of a tile of `op(a)` with a packed panel of `op(b)`.
fn tile_sums(a: &Tile<'_>, b: &[u32]) -> [f32; MR * NR] {
    assert!(
        a.holds(b.len() / NR),
        "a tile's rows lie outside its operand"
    );
    #[cfg(target_arch = "x86_64")]
    if detected() {
        // SAFETY: the CPU has AVX-512F and AVX512-BF16, checked just above; the tile holds
        // the panel's pairs, asserted above.
        return unsafe { tile_sums_avx512_bf16(a, b) };
    }
    tile_sums_scalar(a, b)
}

/// [`tile_sums`] on `VDPBF16PS`: 24 vectors of sums held in registers over the whole inner
/// dimension.
///
/// # Safety
/// The CPU must support AVX-512F and AVX512-BF16, and `a` must hold `b`'s pairs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile_sums_avx512_bf16(a: &Tile<'_>, b: &[u32]) -> [f32; MR * NR] {
    use std::arch::x86_64::*;
    let mut sums = [_mm512_setzero_ps(); 2 * MR];
    for (p, b) in b.chunks_exact(NR).enumerate() {
        // SAFETY: `b` holds NR = 32 pairs, two vectors of 16; unaligned loads.
        let (left, right) = unsafe {
            (
                _mm512_loadu_si512(b.as_ptr().cast()),
                _mm512_loadu_si512(b.as_ptr().add(16).cast()),
            )
        };
        // SAFETY: a vector of 32-bit pairs of bf16 bits is a vector of 32 bf16 values.
        let (left, right): (__m512bh, __m512bh) = unsafe {
            (
                std::mem::transmute::<__m512i, __m512bh>(left),
                std::mem::transmute::<__m512i, __m512bh>(right),
            )
        };
        for r in 0..MR {
            // SAFETY: `p` is one of `b`'s pairs, which the caller guarantees `a` holds; the
            // broadcast pair is a vector of bf16 values as above.
            let x: __m512bh = unsafe {
                std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(a.pair(r, p) as i32))
            };
            sums[2 * r] = _mm512_dpbf16_ps(sums[2 * r], x, left);
            sums[2 * r + 1] = _mm512_dpbf16_ps(sums[2 * r + 1], x, right);
        }
    }
    let mut out = [0f32; MR * NR];
    for (vector, chunk) in sums.iter().zip(out.chunks_exact_mut(16)) {
        // SAFETY: `chunk` holds 16 f32 values; an unaligned store.
        unsafe { _mm512_storeu_ps(chunk.as_mut_ptr(), *vector) };
    }
    out
}

/// [`tile_sums`] without the instruction: the same pairs, multiplied in f32.
fn tile_sums_scalar(a: &Tile<'_>, b: &[u32]) -> [f32; MR * NR] {
    let wide = |bits: u32| f32::from_bits(bits << 16);
    let mut out = [0f32; MR * NR];
    for (p, b) in b.chunks_exact(NR).enumerate() {
        for (r, row) in out.chunks_exact_mut(NR).enumerate() {
            // SAFETY: the caller asserted that `a` holds `b`'s pairs.
            let x = unsafe { a.pair(r, p) };
            for (&y, sum) in b.iter().zip(row) {
                *sum += wide(x & 0xffff) * wide(y & 0xffff) + wide(x >> 16) * wide(y >> 16);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::pack::pair;
    use super::super::tests::values;
    use super::*;

    #[test]
    fn the_scalar_tile_agrees_with_the_instruction() {
        let (pairs, step) = (9, 2 * MR + 6);
        let a = Tile {
            data: &values(pairs * step, 5),
            rows: std::array::from_fn(|r| 2 * r),
            step,
        };
        let b: Vec<u32> = (0..pairs * NR)
            .map(|i| pair(values(2, i + 3)[1], values(2, i)[0]))
            .collect();
        assert_eq!(tile_sums(&a, &b), tile_sums_scalar(&a, &b));
    }
}
