//! bf16 products on AMX tiles: strips of [`ROWS`] output rows against panels of [`NR`]
//! columns, each strip's 2 x 2 tiles of sums held over the inner dimension (a long one in
//! passes of [`PASS_PAIRS`] pairs, added up in f32). `op(b)`'s
//! panels are packed a block at a time with their pairs padded to whole tiles. `op(a)` is read
//! as stored where its rows hold whole tiles (untransposed, the inner dimension a multiple of
//! 32, at least [`ROWS`] rows: the last strip is shifted up to end at the matrix's edge and
//! writes only its new rows), and packed whole, row by row, otherwise.

use std::ops::Range;

use half::bf16;

use super::pack::{pack_line, pack_rows, pairs16, transpose16};
use super::tiles::{PAIRS, Permission, ROWS, Strip, Tiles};
use super::{BLOCK_BYTES, NR, each_block, each_chunk, write_sums};
use crate::dtype::{DType, Float};
use crate::ops::elementwise::isa::has_avx512;
use crate::ops::gemm::kernels::GemmSpec;

/// Inner pairs a pass sums at once (2048 inner elements). A longer inner dimension (the head's
/// input gradient sums over 49 152 vocabulary entries) runs in passes of this many, each
/// adding into f32 sums, so that a strip's slice of `op(a)` stays in cache while the panels
/// pass instead of streaming from memory once per block of panels.
const PASS_PAIRS: usize = 1024;

/// Where the packed operands of one product lie.
pub(super) struct Layout {
    /// Inner pairs, rounded up to whole tiles.
    pairs: usize,
    /// Inner pairs of a pass (all of them when one pass holds them).
    pass_pairs: usize,
    /// Strips of [`ROWS`] output rows.
    strips: usize,
    /// Panels of [`NR`] columns of `op(b)`.
    panels: usize,
    /// Panels packed at once.
    per_block: usize,
    /// Whether `op(a)` is read as stored.
    direct: bool,
    /// f32 sums kept between passes: the output's elements where there are several passes.
    sums: usize,
}

impl Layout {
    pub(super) fn of(spec: &GemmSpec) -> Self {
        let pairs = spec.k.div_ceil(2 * PAIRS) * PAIRS;
        let pass_pairs = pairs.min(PASS_PAIRS);
        let panels = spec.n.div_ceil(NR);
        Layout {
            pairs,
            pass_pairs,
            strips: spec.m.div_ceil(ROWS),
            panels,
            per_block: (BLOCK_BYTES / (pass_pairs * NR * 4).max(1)).clamp(1, panels.max(1)),
            direct: !spec.trans_a && spec.k.is_multiple_of(2 * PAIRS) && spec.m >= ROWS,
            sums: if pairs > pass_pairs {
                spec.m * spec.n
            } else {
                0
            },
        }
    }

    fn a_words(&self) -> usize {
        if self.direct {
            0
        } else {
            self.strips * ROWS * self.pairs
        }
    }

    fn block_words(&self) -> usize {
        self.per_block * self.pass_pairs * NR
    }

    /// Pairs one product packs: `op(a)` (unless it is read as stored) and every panel of
    /// `op(b)`.
    pub(super) fn packed(&self) -> usize {
        self.a_words() + self.panels * self.pairs * NR
    }

    /// Scratch words of one product: the packed `op(a)`, one packed block of `op(b)` and the
    /// sums kept between passes.
    pub(super) fn words(&self) -> usize {
        self.a_words() + self.block_words() + self.sums
    }
}

/// One product of `spec`'s geometry: `op(a)` packed whole (unless it is read as stored), then
/// pass by pass over the inner dimension, `op(b)` a block of panels at a time against every
/// strip (a parallel task each when `parallel`). Several passes add into f32 sums: the output's
/// own when it is f32, else sums in scratch rounded into it once at the end.
pub(super) fn matrix<O: Float<C = f32>>(
    permission: Permission,
    spec: &GemmSpec,
    a: &[bf16],
    b: &[bf16],
    out: &mut [O],
    scratch: &mut [u32],
    parallel: bool,
) {
    let layout = Layout::of(spec);
    let &GemmSpec { m, n, k, .. } = spec;
    let (packed_a, scratch) = scratch.split_at_mut(layout.a_words());
    let (packed_b, sums) = scratch.split_at_mut(layout.block_words());
    each_chunk(packed_a, ROWS * layout.pairs, parallel, |s, strip| {
        pack_strip(spec, a, s * ROWS, strip)
    });
    let operands = Operands {
        spec,
        layout: &layout,
        permission,
        a,
        packed_a: bytemuck::cast_slice(packed_a),
        b,
        parallel,
    };
    if layout.sums == 0 {
        return operands.pass(0..k, packed_b, out, spec.accumulate);
    }
    let passes = (0..k).step_by(2 * layout.pass_pairs);
    let inner = |start: usize| start..(start + 2 * layout.pass_pairs).min(k);
    if let Some(out) = as_f32(out) {
        for (i, start) in passes.enumerate() {
            operands.pass(inner(start), packed_b, out, spec.accumulate || i > 0);
        }
        return;
    }
    let sums: &mut [f32] = bytemuck::cast_slice_mut(&mut sums[..m * n]);
    for (i, start) in passes.enumerate() {
        operands.pass(inner(start), packed_b, sums, i > 0);
    }
    let sums = &*sums;
    each_chunk(out, ROWS * n, parallel, |s, rows| {
        write_sums(
            &sums[s * ROWS * n..][..rows.len()],
            rows,
            n,
            0,
            n,
            spec.accumulate,
        )
    });
}

/// A product's operands as one pass reads them.
struct Operands<'a> {
    spec: &'a GemmSpec,
    layout: &'a Layout,
    permission: Permission,
    a: &'a [bf16],
    /// `op(a)` packed whole, where it is not read as stored.
    packed_a: &'a [bf16],
    b: &'a [bf16],
    parallel: bool,
}

impl Operands<'_> {
    /// `out (+)=` the sums over the inner elements `inner` (a whole number of tiles' pairs from
    /// where a tile's pairs start), `op(b)` packed a block at a time into `packed_b`.
    fn pass<O: Float<C = f32>>(
        &self,
        inner: Range<usize>,
        packed_b: &mut [u32],
        out: &mut [O],
        add: bool,
    ) {
        let Self { spec, layout, .. } = *self;
        let &GemmSpec { m, n, k, .. } = spec;
        let pairs = inner.len().div_ceil(2 * PAIRS) * PAIRS;
        let start = inner.start;
        let geometry = (pairs, layout.per_block);
        each_block(
            spec,
            self.b,
            inner,
            geometry,
            packed_b,
            self.parallel,
            |first, block| {
                each_chunk(out, ROWS * n, self.parallel, |s, rows| {
                    let top = s * ROWS;
                    // A shifted strip's first rows were written by the strip above it.
                    let (strip, skip) = if layout.direct {
                        let begin = top.min(m - ROWS);
                        let data = &self.a[begin * k + start..];
                        (Strip { data, stride: k }, top - begin)
                    } else {
                        let stride = 2 * layout.pairs;
                        let data = &self.packed_a[top * stride + start..][..ROWS * stride - start];
                        (Strip { data, stride }, 0)
                    };
                    let tiles = Tiles::configure(self.permission);
                    let full_rows = skip == 0 && rows.len() == ROWS * n;
                    for (q, panel) in block.chunks_exact(pairs * NR).enumerate() {
                        let column = (first + q) * NR;
                        match as_f32(rows) {
                            // Whole tiles of an f32 output start from it and are stored into it.
                            Some(c) if full_rows && column + NR <= n => {
                                tiles.add_strip(&strip, panel, &mut c[column..], n, add)
                            }
                            _ => {
                                let sums = tiles.strip_sums(&strip, panel);
                                write_sums(&sums[skip * NR..], rows, NR, column, n, add);
                            }
                        }
                    }
                });
            },
        );
    }
}

/// `out` as f32 values where it is an f32 output.
fn as_f32<O: Float>(out: &mut [O]) -> Option<&mut [f32]> {
    let f32_out = O::DTYPE == DType::F32 && size_of::<O>() == size_of::<f32>();
    // SAFETY: the only float type of dtype f32 is `f32` itself (its size checked too); the
    // slice is the same memory under its own type, borrowed as long.
    f32_out.then(|| unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast(), out.len()) })
}

/// Rows `first ..` of `op(a)` as `[ROWS][pairs]`, zeros past the matrix's edges.
fn pack_strip(spec: &GemmSpec, a: &[bf16], first: usize, strip: &mut [u32]) {
    let &GemmSpec { m, k, .. } = spec;
    let (rows, pairs) = (ROWS.min(m - first), strip.len() / ROWS);
    if rows < ROWS || 2 * pairs > k {
        strip.fill(0);
    }
    if spec.trans_a {
        let (whole_rows, whole_pairs) = interleaved_blocks(a, m, first, rows, k, strip);
        for p in 0..k.div_ceil(2) {
            // The rows the whole blocks packed are not packed again.
            let done = if p < whole_pairs { whole_rows } else { 0 };
            let left = rows - done;
            if left == 0 {
                continue;
            }
            let line = |kk: usize| (kk < k).then(|| &a[kk * m + first + done..][..left]);
            let mut pair = [0u32; ROWS];
            pack_rows(
                &a[2 * p * m + first + done..][..left],
                line(2 * p + 1),
                &mut pair,
            );
            for (r, &value) in pair[..left].iter().enumerate() {
                strip[(done + r) * pairs + p] = value;
            }
        }
    } else {
        for r in 0..rows {
            pack_line(&a[(first + r) * k..][..k], &mut strip[r * pairs..], 1);
        }
    }
}

/// Packs a transposed `op(a)`'s strip (`a` stored `[k][m]`) in whole blocks of 16 rows by 16
/// pairs: each row's two inner elements interleaved into pairs, then 16 x 16 pairs transposed.
/// Says how far whole blocks reached, `(rows, pairs)`; none where the CPU lacks AVX-512.
fn interleaved_blocks(
    a: &[bf16],
    m: usize,
    first: usize,
    rows: usize,
    k: usize,
    strip: &mut [u32],
) -> (usize, usize) {
    let (whole_rows, whole_pairs) = (rows / 16 * 16, k / 32 * 16);
    if whole_rows * whole_pairs == 0 || !has_avx512() {
        return (0, 0);
    }
    let pairs = strip.len() / ROWS;
    assert!(
        (2 * whole_pairs - 1) * m + first + whole_rows <= a.len() && whole_pairs <= pairs,
        "a strip's pairs lie outside its operand"
    );
    // SAFETY: the CPU has AVX-512F, checked above, and the assert bounds every access.
    unsafe { interleave_transposed(a, m, first, (whole_rows, whole_pairs), strip, pairs) };
    (whole_rows, whole_pairs)
}

/// [`interleaved_blocks`]' blocks: pair `p` of row `r` (elements `2p` and `2p + 1` of column
/// `first + r` of `a`) into slot `r * pairs + p` of `strip`.
///
/// # Safety
/// The CPU must support AVX-512F, and `a` and `strip` must hold the blocks `whole` names.
#[target_feature(enable = "avx512f")]
unsafe fn interleave_transposed(
    a: &[bf16],
    m: usize,
    first: usize,
    whole: (usize, usize),
    strip: &mut [u32],
    pairs: usize,
) {
    use std::arch::x86_64::*;
    let (a, out) = (a.as_ptr(), strip.as_mut_ptr());
    for top in (0..whole.0).step_by(16) {
        for block in (0..whole.1).step_by(16) {
            let lines = std::array::from_fn(|j| {
                let lo = 2 * (block + j) * m + first + top;
                // SAFETY: rows `top .. top + 16` of inner elements `2p` and `2p + 1` lie
                // within `a` (the caller's promise).
                unsafe { pairs16(a.add(lo), a.add(lo + m)) }
            });
            for (i, row) in transpose16(lines).iter().enumerate() {
                // SAFETY: row `top + i`'s pairs `block .. block + 16` lie within `strip` (the
                // caller's promise); an unaligned store.
                unsafe { _mm512_storeu_si512(out.add((top + i) * pairs + block).cast(), *row) };
            }
        }
    }
}
