//! bf16 products on the CPU's bf16 dot-product instruction (AVX512-BF16's `VDPBF16PS`: 16 f32
//! sums, each gaining the products of one pair of bf16 values), twice the rate of f32 FMAs and
//! with no widened copy of either operand. Both operands are taken in pairs along the inner
//! dimension: `op(b)` packed in panels of [`NR`] columns, a block of panels at a time, and
//! `op(a)` read as stored where its rows hold whole pairs, packed whole in tiles of [`MR`] rows
//! otherwise. Each sum runs in f32 over the whole inner dimension and is rounded once into the
//! output (bf16, or f32 for a gradient summed in place). The packed operands lie in scratch the
//! caller takes from the device's memory ([`scratch_words`]), as a meta device plans it.

use std::sync::OnceLock;

use half::bf16;
use rayon::prelude::*;

use super::few_rows::is_few_rows;
use super::kernels::GemmSpec;
use crate::dtype::{DType, Float};

/// Output rows of a tile: each inner pair of a row is broadcast against a panel.
const MR: usize = 12;
/// Output columns of a tile: two vectors of 16 f32 sums.
const NR: usize = 32;
/// Bytes of `op(b)` packed at once (at least one panel): the block every task reads while it
/// stays in the cache the cores share.
const BLOCK_BYTES: usize = 1 << 19;
/// Up to this many multiply-adds per product, the products of a batch run in parallel instead
/// of the tiles of each.
const SMALL_PRODUCT: usize = 1 << 21;

/// Whether this CPU has AVX512-BF16 and the environment does not set
/// `HEADROOM_CPU_BF16=widen` (which runs bf16 products as a CPU without it does); read once.
pub(crate) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let widen = std::env::var("HEADROOM_CPU_BF16").is_ok_and(|v| v == "widen");
        detected() && !widen
    })
}

/// Whether this CPU has AVX-512F and AVX512-BF16.
fn detected() -> bool {
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

/// Whether a product of `a_dtype` operands into an `out_dtype` output runs here on this CPU
/// (a few rows into bf16 run in `few_rows` instead); on a meta device planning for the CPU too.
pub(crate) fn takes(spec: &GemmSpec, a_dtype: DType, out_dtype: DType) -> bool {
    let few_rows = out_dtype == a_dtype && is_few_rows(spec);
    a_dtype == DType::BF16
        && matches!(out_dtype, DType::BF16 | DType::F32)
        && !few_rows
        && available()
}

/// 32-bit words of scratch [`product`] takes for `spec`: the packed `op(a)` and one packed
/// block of `op(b)`, for each product that runs at once (none for a product of no terms).
pub(crate) fn scratch_words(spec: &GemmSpec) -> usize {
    if spec.m * spec.n * spec.k == 0 {
        return 0;
    }
    let layout = Layout::of(spec);
    let at_once = if batches_in_parallel(spec) {
        spec.batch
    } else {
        1
    };
    at_once * (layout.a_words() + layout.block_words())
}

/// Where the packed operands of one product lie.
struct Layout {
    /// Inner pairs: the inner dimension halved, rounded up.
    pairs: usize,
    /// Tiles of [`MR`] output rows.
    tiles: usize,
    /// Panels of [`NR`] output columns.
    panels: usize,
    /// Panels packed at once.
    per_block: usize,
    /// Whether `op(a)` is read as stored: untransposed rows of whole pairs (an even inner
    /// dimension), each pair one 32-bit load.
    direct: bool,
}

impl Layout {
    fn of(spec: &GemmSpec) -> Self {
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
}

/// Whether the products of `spec`'s batch run in parallel (each small) rather than the tiles
/// of each.
fn batches_in_parallel(spec: &GemmSpec) -> bool {
    spec.batch > 1 && spec.m * spec.n * spec.k <= SMALL_PRODUCT
}

/// `out[i] (+)= op(a[i]) op(b[i])` for every product `i` of `spec`, into bf16 (each sum
/// rounded once by [`Float::store`]) or f32, with `scratch` of [`scratch_words`] to pack the
/// operands into. The caller has checked [`available`]; `a`, `b`
/// and `out` hold the elements `spec` addresses.
pub(crate) fn product<O: Float<C = f32>>(
    spec: &GemmSpec,
    a: &[bf16],
    b: &[bf16],
    out: &mut [O],
    scratch: &mut [u32],
) {
    let &GemmSpec { m, n, k, .. } = spec;
    if out.is_empty() {
        return;
    }
    if k == 0 {
        if !spec.accumulate {
            out.fill(O::store(0.0));
        }
        return;
    }
    let layout = Layout::of(spec);
    let words = layout.a_words() + layout.block_words();
    let one = |index: usize, c: &mut [O], scratch: &mut [u32], parallel: bool| {
        let a = &a[index * spec.a_batch_stride..][..m * k];
        let b = &b[index * spec.b_batch_stride..][..k * n];
        matrix(spec, &layout, a, b, c, scratch, parallel);
    };
    if batches_in_parallel(spec) {
        out.par_chunks_mut(m * n)
            .zip(scratch.par_chunks_mut(words))
            .enumerate()
            .for_each(|(index, (c, scratch))| one(index, c, scratch, false));
    } else {
        for (index, c) in out.chunks_mut(m * n).enumerate() {
            one(index, c, &mut scratch[..words], true);
        }
    }
}

/// One product of `spec`'s geometry: `op(a)` packed whole (unless it is read as stored),
/// `op(b)` a block of panels at a time, then every tile of [`MR`] output rows against the
/// block (a parallel task each when `parallel`).
fn matrix<O: Float<C = f32>>(
    spec: &GemmSpec,
    layout: &Layout,
    a: &[bf16],
    b: &[bf16],
    out: &mut [O],
    scratch: &mut [u32],
    parallel: bool,
) {
    let &Layout {
        pairs,
        panels,
        per_block,
        ..
    } = layout;
    let n = spec.n;
    let (packed_a, packed_b) = scratch.split_at_mut(layout.a_words());
    each_chunk(packed_a, pairs * MR, parallel, |t, tile| {
        pack_a(spec, a, t * MR, tile)
    });
    let packed_a = &*packed_a;
    for first in (0..panels).step_by(per_block) {
        let block = &mut packed_b[..per_block.min(panels - first) * pairs * NR];
        each_chunk(block, pairs * NR, parallel, |q, panel| {
            pack_b(spec, b, first + q, panel)
        });
        let block = &*block;
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
                write_tile(&sums, rows, n, (first + q) * NR, spec.accumulate);
            }
        });
    }
}

/// `f(index, chunk)` for each chunk of `size` of `x`: a parallel task each when `parallel`.
fn each_chunk<T: Send>(
    x: &mut [T],
    size: usize,
    parallel: bool,
    f: impl Fn(usize, &mut [T]) + Send + Sync,
) {
    if parallel {
        x.par_chunks_mut(size)
            .enumerate()
            .for_each(|(index, chunk)| f(index, chunk));
    } else {
        (x.chunks_mut(size).enumerate()).for_each(|(index, chunk)| f(index, chunk));
    }
}

/// Two bf16 values as one 32-bit pair, the first in the low half (the order `VDPBF16PS` pairs
/// the lanes of both operands in).
#[inline(always)]
fn pair(first: bf16, second: bf16) -> u32 {
    u32::from(first.to_bits()) | (u32::from(second.to_bits()) << 16)
}

/// The pairs of one line of inner elements (`k` long) into every `stride`-th slot of `packed`,
/// the last pair's second half zero when `k` is odd.
#[inline(always)]
fn pack_line(line: &[bf16], packed: &mut [u32], stride: usize) {
    for (two, slot) in line.chunks(2).zip(packed.iter_mut().step_by(stride)) {
        *slot = pair(two[0], two.get(1).copied().unwrap_or(bf16::ZERO));
    }
}

/// The pairs of two rows of inner elements `2p` and `2p + 1` (`hi` absent past an odd `k`)
/// into consecutive slots.
#[inline(always)]
fn pack_rows(lo: &[bf16], hi: Option<&[bf16]>, packed: &mut [u32]) {
    match hi {
        Some(hi) => (packed.iter_mut().zip(lo.iter().zip(hi)))
            .for_each(|(slot, (&lo, &hi))| *slot = pair(lo, hi)),
        None => (packed.iter_mut().zip(lo)).for_each(|(slot, &lo)| *slot = pair(lo, bf16::ZERO)),
    }
}

/// Panel `q` of `op(b)` (columns `q * NR ..`) as `[pairs][NR]`: each column's inner elements
/// `2p` and `2p + 1` in pair `p`, zeros past the matrix's edges.
fn pack_b(spec: &GemmSpec, b: &[bf16], q: usize, panel: &mut [u32]) {
    let &GemmSpec { n, k, .. } = spec;
    let (first, columns) = (q * NR, NR.min(n - q * NR));
    if columns < NR {
        panel.fill(0);
    }
    if spec.trans_b {
        for c in 0..columns {
            pack_line(&b[(first + c) * k..][..k], &mut panel[c..], NR);
        }
    } else {
        for (p, slots) in panel.chunks_exact_mut(NR).enumerate() {
            let row = |kk: usize| (kk < k).then(|| &b[kk * n + first..][..columns]);
            pack_rows(&b[2 * p * n + first..][..columns], row(2 * p + 1), slots);
        }
    }
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

/// Writes (or adds) a tile's sums into `rows` (up to [`MR`] output rows of `n`) from column
/// `first`, leaving out what lies past the matrix's edges.
fn write_tile<O: Float<C = f32>>(
    sums: &[f32; MR * NR],
    rows: &mut [O],
    n: usize,
    first: usize,
    add: bool,
) {
    let columns = NR.min(n - first);
    for (row, sums) in rows.chunks_exact_mut(n).zip(sums.chunks_exact(NR)) {
        let (row, sums) = (&mut row[first..first + columns], &sums[..columns]);
        if add {
            row.iter_mut()
                .zip(sums)
                .for_each(|(o, &s)| *o = O::store(o.load() + s));
        } else {
            row.iter_mut()
                .zip(sums)
                .for_each(|(o, &s)| *o = O::store(s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values that bf16 holds exactly, varied enough to catch a misplaced element.
    fn values(len: usize, seed: usize) -> Vec<bf16> {
        (0..len)
            .map(|i| bf16::from_f32(((i * 7 + seed * 13) % 23) as f32 / 8.0 - 1.375))
            .collect()
    }

    /// The product in f64 from the bf16 values, element `[batch][i][j]`.
    fn reference(spec: &GemmSpec, a: &[bf16], b: &[bf16]) -> Vec<f64> {
        let &GemmSpec { m, n, k, .. } = spec;
        let mut out = vec![0f64; spec.batch * m * n];
        for (index, c) in out.chunks_mut(m * n).enumerate() {
            let a = &a[index * spec.a_batch_stride..];
            let b = &b[index * spec.b_batch_stride..];
            for i in 0..m {
                for j in 0..n {
                    c[i * n + j] = (0..k)
                        .map(|kk| {
                            let x = if spec.trans_a {
                                a[kk * m + i]
                            } else {
                                a[i * k + kk]
                            };
                            let y = if spec.trans_b {
                                b[j * k + kk]
                            } else {
                                b[kk * n + j]
                            };
                            f64::from(x.to_f32()) * f64::from(y.to_f32())
                        })
                        .sum();
                }
            }
        }
        out
    }

    #[test]
    fn every_layout_and_edge_matches_the_exact_product() {
        // Odd sizes cut tiles and pairs at every edge; exact inputs keep every sum exact in f32.
        for (batch, m, n, k) in [(1, 1, 1, 1), (1, 13, 33, 7), (1, 25, 70, 130), (3, 5, 9, 4)] {
            for (trans_a, trans_b) in [(false, false), (false, true), (true, false), (true, true)] {
                let spec = GemmSpec {
                    batch,
                    m,
                    n,
                    k,
                    trans_a,
                    trans_b,
                    a_batch_stride: m * k,
                    b_batch_stride: if batch > 1 { k * n } else { 0 },
                    accumulate: false,
                };
                let (a, b) = (values(batch * m * k, 1), values(k * n * batch, 2));
                let mut out = vec![f32::NAN; batch * m * n];
                product(&spec, &a, &b, &mut out, &mut vec![7; scratch_words(&spec)]);
                let want = reference(&spec, &a, &b);
                let got: Vec<f64> = out.iter().map(|&x| f64::from(x)).collect();
                assert_eq!(got, want, "{spec:?}");
            }
        }
    }

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

    #[test]
    fn a_bf16_output_adds_into_what_it_holds_and_rounds_once() {
        let spec = GemmSpec {
            batch: 1,
            m: 2,
            n: 3,
            k: 2,
            trans_a: false,
            trans_b: false,
            a_batch_stride: 0,
            b_batch_stride: 0,
            accumulate: true,
        };
        let ones = vec![bf16::ONE; 6];
        // Each product is 2, and 256 + 2 = 258 is a bf16 value (they step by 2 there).
        let mut out = vec![bf16::from_f32(256.0); 6];
        product(
            &spec,
            &ones[..4],
            &ones,
            &mut out,
            &mut vec![7; scratch_words(&spec)],
        );
        assert!(out.iter().all(|x| x.to_f32() == 258.0), "{out:?}");
    }
}
