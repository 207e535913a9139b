//! bf16 products on the CPU's bf16 instructions, each sum in f32 over the whole inner dimension
//! and rounded once into the output (bf16, or f32 for a gradient summed in place): on AMX tiles
//! (`TDPBF16PS`, [`amx`]) where the CPU has them, on AVX512-BF16's `VDPBF16PS` ([`dot`])
//! otherwise. Both take the operands in pairs along the inner dimension ([`pack`]), `op(b)` in
//! panels of [`NR`] columns a block at a time. The packed operands lie in scratch the caller
//! takes from the device's memory ([`scratch_words`]), as a meta device plans it.

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod amx;
mod dot;
mod pack;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod tiles;

use std::ops::Range;
use std::sync::OnceLock;

use half::bf16;
use rayon::prelude::*;

use super::few_rows::is_few_rows;
use super::kernels::GemmSpec;
use crate::dtype::{DType, Float};
use crate::ops::elementwise::isa::in_best_isa;

/// Output columns of a panel of `op(b)`: two vectors of 16 f32 sums, or two tiles' columns.
const NR: usize = 32;
/// Bytes of `op(b)` packed at once (at least one panel): the block every task reads while it
/// stays in the cache the cores share.
const BLOCK_BYTES: usize = 1 << 19;
/// Up to this many multiply-adds per product, the products of a batch run in parallel instead
/// of the tiles of each.
const SMALL_PRODUCT: usize = 1 << 21;

/// The instructions a bf16 product runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// AMX tiles, with the process's permission to use them.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    Amx(tiles::Permission),
    /// AVX512-BF16's `VDPBF16PS` (its scalar form where the CPU lacks it, in tests).
    Dot,
}

/// The kernel this CPU's bf16 products run on, read once: AMX where the CPU has it and the
/// kernel lets the process use its tiles, `VDPBF16PS` where the CPU has AVX-512F and
/// AVX512-BF16, none otherwise. `HEADROOM_CPU_BF16=widen` runs them as a CPU without either
/// does (widened to f32) and `HEADROOM_CPU_BF16=dot` keeps them off AMX.
fn kernel() -> Option<Kernel> {
    static KERNEL: OnceLock<Option<Kernel>> = OnceLock::new();
    *KERNEL.get_or_init(|| {
        let asked = std::env::var("HEADROOM_CPU_BF16").unwrap_or_default();
        if asked == "widen" {
            return None;
        }
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        if asked != "dot"
            && let Some(permission) = tiles::permission()
        {
            return Some(Kernel::Amx(permission));
        }
        dot::detected().then_some(Kernel::Dot)
    })
}

/// Whether this CPU multiplies bf16 operands as they are (see [`kernel`]).
pub(crate) fn available() -> bool {
    kernel().is_some()
}

/// Whether this CPU's bf16 products run on AMX tiles (see [`kernel`]), where even small blocks
/// of them outrun f32's.
pub(crate) fn on_tiles() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    return matches!(kernel(), Some(Kernel::Amx(_)));
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    false
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

/// 32-bit words of scratch [`product`] takes for `spec` on this CPU: each product's packed
/// operands, for each product that runs at once (none for a product of no terms).
pub(crate) fn scratch_words(spec: &GemmSpec) -> usize {
    scratch_words_on(kernel().unwrap_or(Kernel::Dot), spec)
}

fn scratch_words_on(kernel: Kernel, spec: &GemmSpec) -> usize {
    if spec.m * spec.n * spec.k == 0 {
        return 0;
    }
    let at_once = if batches_in_parallel(spec) {
        spec.batch
    } else {
        1
    };
    at_once * words_on(kernel, spec)
}

/// Scratch words of one product of `spec`'s geometry.
fn words_on(kernel: Kernel, spec: &GemmSpec) -> usize {
    match kernel {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        Kernel::Amx(_) => amx::Layout::of(spec).words(),
        Kernel::Dot => dot::Layout::of(spec).words(),
    }
}

/// Pairs of bf16 values [`product`] packs for `spec` on this CPU, over all its products: what
/// a plan prices at the packing rate beside the arithmetic.
pub(crate) fn packed_pairs(spec: &GemmSpec) -> usize {
    if spec.m * spec.n * spec.k == 0 {
        return 0;
    }
    let one = match kernel().unwrap_or(Kernel::Dot) {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        Kernel::Amx(_) => amx::Layout::of(spec).packed(),
        Kernel::Dot => dot::Layout::of(spec).packed(),
    };
    spec.batch * one
}

/// Whether the products of `spec`'s batch run in parallel (each small) rather than the tiles
/// of each.
fn batches_in_parallel(spec: &GemmSpec) -> bool {
    spec.batch > 1 && spec.m * spec.n * spec.k <= SMALL_PRODUCT
}

/// `out[i] (+)= op(a[i]) op(b[i])` for every product `i` of `spec`, into bf16 (each sum
/// rounded once by [`Float::store`]) or f32, with `scratch` of [`scratch_words`] to pack the
/// operands into; its tiles or products run as parallel tasks when `parallel` (not for a small
/// product inside a task of its own). The caller has checked [`available`]; `a`, `b` and `out`
/// hold the elements `spec` addresses.
pub(crate) fn product<O: Float<C = f32>>(
    spec: &GemmSpec,
    (a, b): (&[bf16], &[bf16]),
    out: &mut [O],
    scratch: &mut [u32],
    parallel: bool,
) {
    let kernel = kernel().unwrap_or(Kernel::Dot);
    product_on(kernel, spec, a, b, out, scratch, parallel);
}

fn product_on<O: Float<C = f32>>(
    kernel: Kernel,
    spec: &GemmSpec,
    a: &[bf16],
    b: &[bf16],
    out: &mut [O],
    scratch: &mut [u32],
    parallel: bool,
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
    let words = words_on(kernel, spec);
    let one = |index: usize, c: &mut [O], scratch: &mut [u32], parallel: bool| {
        let a = &a[index * spec.a_batch_stride..][..m * k];
        let b = &b[index * spec.b_batch_stride..][..k * n];
        match kernel {
            #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
            Kernel::Amx(permission) => amx::matrix(permission, spec, a, b, c, scratch, parallel),
            Kernel::Dot => dot::matrix(spec, a, b, c, scratch, parallel),
        }
    };
    if parallel && batches_in_parallel(spec) {
        out.par_chunks_mut(m * n)
            .zip(scratch.par_chunks_mut(words))
            .enumerate()
            .for_each(|(index, (c, scratch))| one(index, c, scratch, false));
    } else {
        for (index, c) in out.chunks_mut(m * n).enumerate() {
            one(index, c, &mut scratch[..words], parallel);
        }
    }
}

/// Packs `op(b)` over the inner elements `inner` a block of `per_block` panels at a time into
/// `packed` (panels of `pairs` pair rows) and hands each block to `f` with the index of its
/// first panel.
fn each_block(
    spec: &GemmSpec,
    b: &[bf16],
    inner: Range<usize>,
    (pairs, per_block): (usize, usize),
    packed: &mut [u32],
    parallel: bool,
    mut f: impl FnMut(usize, &[u32]),
) {
    let panels = spec.n.div_ceil(NR);
    for first in (0..panels).step_by(per_block) {
        let block = &mut packed[..per_block.min(panels - first) * pairs * NR];
        each_chunk(block, pairs * NR, parallel, |q, panel| {
            pack::pack_b(spec, b, inner.clone(), first + q, panel)
        });
        f(first, block);
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

/// Writes (or adds) sums of `width` columns a row into `rows` (output rows of `n`) from
/// column `first`, as many rows as both hold, leaving out what lies past the matrix's edges.
fn write_sums<O: Float<C = f32>>(
    sums: &[f32],
    rows: &mut [O],
    width: usize,
    first: usize,
    n: usize,
    add: bool,
) {
    let columns = width.min(n - first);
    in_best_isa(
        #[inline(always)]
        || {
            for (row, sums) in rows.chunks_exact_mut(n).zip(sums.chunks_exact(width)) {
                let (row, sums) = (&mut row[first..first + columns], &sums[..columns]);
                if add {
                    (row.iter_mut().zip(sums)).for_each(|(o, &s)| *o = O::store(o.load() + s));
                } else {
                    (row.iter_mut().zip(sums)).for_each(|(o, &s)| *o = O::store(s));
                }
            }
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel this machine can run: `VDPBF16PS` (or its scalar form) always, AMX where
    /// the CPU has it.
    fn kernels() -> Vec<Kernel> {
        #[allow(unused_mut)]
        let mut kernels = vec![Kernel::Dot];
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        kernels.extend(tiles::permission().map(Kernel::Amx));
        kernels
    }

    /// Values that bf16 holds exactly, varied enough to catch a misplaced element.
    pub(super) fn values(len: usize, seed: usize) -> Vec<bf16> {
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
    fn every_kernel_layout_and_edge_matches_the_exact_product() {
        // Odd sizes cut tiles and pairs at every edge; exact inputs keep every sum exact in f32.
        // AMX reads rows as stored from 32 rows and 16 pairs on (the last strip shifted up to
        // end at the matrix's edge), packs them below; the last shape runs its tiles in
        // parallel.
        let shapes = [
            (1, 1, 1, 1),
            (1, 13, 33, 7),
            (1, 25, 70, 130),
            (3, 5, 9, 4),
            (1, 45, 40, 64),
            (2, 70, 33, 96),
            (1, 32, 16, 34),
            (1, 130, 150, 160),
        ];
        for kernel in kernels() {
            for (batch, m, n, k) in shapes {
                for (trans_a, trans_b) in
                    [(false, false), (false, true), (true, false), (true, true)]
                {
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
                    let mut scratch = vec![7; scratch_words_on(kernel, &spec)];
                    product_on(kernel, &spec, &a, &b, &mut out, &mut scratch, true);
                    let want = reference(&spec, &a, &b);
                    let got: Vec<f64> = out.iter().map(|&x| f64::from(x)).collect();
                    assert_eq!(got, want, "{kernel:?} {spec:?}");
                }
            }
        }
    }

    #[test]
    fn a_bf16_output_adds_into_what_it_holds_and_rounds_once() {
        for kernel in kernels() {
            for m in [2, 33] {
                let spec = GemmSpec {
                    batch: 1,
                    m,
                    n: 3,
                    k: 32,
                    trans_a: false,
                    trans_b: false,
                    a_batch_stride: 0,
                    b_batch_stride: 0,
                    accumulate: true,
                };
                let ones = vec![bf16::ONE; m.max(3) * 32];
                // Each sum is 32, and 256 + 32 = 288 is a bf16 value (they step by 2 there).
                let mut out = vec![bf16::from_f32(256.0); m * 3];
                let mut scratch = vec![7; scratch_words_on(kernel, &spec)];
                product_on(
                    kernel,
                    &spec,
                    &ones[..m * 32],
                    &ones[..96],
                    &mut out,
                    &mut scratch,
                    true,
                );
                assert!(
                    out.iter().all(|x| x.to_f32() == 288.0),
                    "{kernel:?} {out:?}"
                );
            }
        }
    }

    #[test]
    fn an_f32_output_adds_every_tile_into_what_it_holds() {
        // 64 x 40: whole tiles (added in place on AMX) and a cut edge of 8 columns.
        let (m, n, k) = (64, 40, 64);
        let spec = GemmSpec {
            batch: 1,
            m,
            n,
            k,
            trans_a: false,
            trans_b: true,
            a_batch_stride: 0,
            b_batch_stride: 0,
            accumulate: true,
        };
        let (a, b) = (values(m * k, 4), values(n * k, 6));
        let held: Vec<f32> = values(m * n, 8).iter().map(|x| x.to_f32()).collect();
        let want: Vec<f64> = (reference(&spec, &a, &b).iter().zip(&held))
            .map(|(x, &h)| x + f64::from(h))
            .collect();
        for kernel in kernels() {
            let mut out = held.clone();
            let mut scratch = vec![7; scratch_words_on(kernel, &spec)];
            product_on(kernel, &spec, &a, &b, &mut out, &mut scratch, true);
            let got: Vec<f64> = out.iter().map(|&x| f64::from(x)).collect();
            assert_eq!(got, want, "{kernel:?}");
        }
    }
    #[test]
    fn a_long_inner_dimension_sums_across_passes_into_either_output() {
        // Past 2048 inner elements AMX sums in passes; 4192 is whole tiles (`op(a)` read as
        // stored), 4133 is not (packed, its last pair half empty).
        for kernel in kernels() {
            for (k, (trans_a, trans_b)) in [4192, 4133].into_iter().flat_map(|k| {
                [(false, false), (false, true), (true, false), (true, true)].map(|t| (k, t))
            }) {
                let (m, n) = (45, 40);
                for accumulate in [false, true] {
                    let spec = GemmSpec {
                        batch: 1,
                        m,
                        n,
                        k,
                        trans_a,
                        trans_b,
                        a_batch_stride: 0,
                        b_batch_stride: 0,
                        accumulate,
                    };
                    let (a, b) = (values(m * k, 3), values(k * n, 5));
                    let held = values(m * n, 7);
                    let want: Vec<f64> = (reference(&spec, &a, &b).iter().zip(&held))
                        .map(|(x, h)| x + if accumulate { h.to_f64() } else { 0.0 })
                        .collect();
                    let mut scratch = vec![7; scratch_words_on(kernel, &spec)];
                    let mut wide: Vec<f32> = held.iter().map(|x| x.to_f32()).collect();
                    product_on(kernel, &spec, &a, &b, &mut wide, &mut scratch, true);
                    let got: Vec<f64> = wide.iter().map(|&x| f64::from(x)).collect();
                    assert_eq!(got, want, "{kernel:?} {spec:?} into f32");
                    let mut narrow = held.clone();
                    product_on(kernel, &spec, &a, &b, &mut narrow, &mut scratch, true);
                    let rounded: Vec<bf16> = want.iter().map(|&x| bf16::from_f64(x)).collect();
                    assert_eq!(narrow, rounded, "{kernel:?} {spec:?} into bf16");
                }
            }
        }
    }
}
