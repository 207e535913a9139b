//! Products of a few rows against a weight used transposed (`x @ w^T`: a linear layer while
//! generating, one token at a time), on the CPU. Each weight row is read once, as stored
//! (bf16 widened in registers, f16 in cache), and multiplied with every row of `x` in f32;
//! nothing is widened into device memory, so a token reads each weight's bytes once, at the
//! memory's bandwidth (on AVX-512, f32 and bf16 rows' lines asked for ahead of their reads).

use std::ops::Range;

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

use super::kernels::GemmSpec;
use crate::buffer::Buffer;
use crate::dtype::{Element, Float};
use crate::error::Result;
use crate::ops::elementwise::isa::in_best_isa;

/// Output rows up to which a product against a transposed weight runs here.
pub(crate) const MOST_ROWS: usize = 8;

/// Weight rows (output columns) per parallel task.
const COLUMNS_PER_TASK: usize = 64;

/// Whether a product of `spec`'s shape runs here (a few untransposed rows against one
/// transposed weight), its half operands as they are; on a CPU and on a meta device planning
/// for one alike.
pub(crate) fn is_few_rows(spec: &GemmSpec) -> bool {
    spec.batch == 1 && !spec.trans_a && spec.trans_b && spec.m <= MOST_ROWS && spec.k > 0
}

/// A weight's element type, whose rows the products read as f32.
pub(crate) trait WeightRow: Element + Send + Sync {
    /// `src` as f32: itself for f32, else widened into `scratch` (of the same length).
    #[inline(always)]
    fn as_f32<'a>(src: &'a [Self], scratch: &'a mut [f32]) -> &'a [f32] {
        Self::widen(src, scratch);
        scratch
    }
    /// The products of each row of `x` (`[m, k]`) with `weight` (`k` long) into `sums`, with
    /// `scratch` (`k` long) to widen the weight into.
    #[inline(always)]
    fn dots(x: &[f32], weight: &[Self], scratch: &mut [f32], sums: &mut [f32]) {
        let weight = Self::as_f32(weight, scratch);
        for (sum, x) in sums.iter_mut().zip(x.chunks_exact(weight.len())) {
            *sum = dot(x, weight, |w| w);
        }
    }
    /// Widens `src` into `dst` (of the same length).
    fn widen(src: &[Self], dst: &mut [f32]);
    /// `x` rounded to this type.
    fn narrow(x: f32) -> Self;
    /// This value as an f32.
    fn wide(self) -> f32;
}

impl WeightRow for f32 {
    fn as_f32<'a>(src: &'a [Self], _: &'a mut [f32]) -> &'a [f32] {
        src
    }

    #[inline(always)]
    fn dots(x: &[f32], weight: &[Self], _: &mut [f32], sums: &mut [f32]) {
        dots_as_stored(x, weight, sums);
    }

    fn widen(src: &[Self], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }

    fn narrow(x: f32) -> Self {
        x
    }

    fn wide(self) -> f32 {
        self
    }
}

impl WeightRow for bf16 {
    /// Widened in registers as each product reads it.
    #[inline(always)]
    fn dots(x: &[f32], weight: &[Self], _: &mut [f32], sums: &mut [f32]) {
        dots_as_stored(x, weight, sums);
    }

    fn widen(src: &[Self], dst: &mut [f32]) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = s.load();
        }
    }

    fn narrow(x: f32) -> Self {
        bf16::from_f32(x)
    }

    fn wide(self) -> f32 {
        self.to_f32()
    }
}

impl WeightRow for f16 {
    fn widen(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }

    fn narrow(x: f32) -> Self {
        f16::from_f32(x)
    }

    fn wide(self) -> f32 {
        self.to_f32()
    }
}

/// `out (+)= a @ b^T` for `spec` ([`is_few_rows`]): `a` `[m, k]`, `b` `[n, k]`, `out` `[m, n]`,
/// all of type `T` (f32, bf16 or f16), the sums in f32 (and the accumulated output added in
/// f32), each output rounded once.
pub(crate) fn few_rows<T: WeightRow>(
    spec: &GemmSpec,
    a: &Buffer,
    b: &Buffer,
    out: &mut Buffer,
) -> Result<()> {
    let b = b.host::<T>("gemm")?;
    let k = spec.k;
    few_rows_with::<T>(spec, a, out, |x, weights, row| {
        products_best_isa(x, &b[weights.start * k..weights.end * k], row)
    })
}

/// [`few_rows`] with the weight's rows read by `products(x, weights, row)`: the products of the
/// rows of `x` (`[m, k]`, widened to f32) with the weight's rows `weights`, as `[w, m]`, with
/// `row` (`k` long) to widen a weight row into; a parallel task per 64 weight rows.
pub(crate) fn few_rows_with<T: WeightRow>(
    spec: &GemmSpec,
    a: &Buffer,
    out: &mut Buffer,
    products: impl Fn(&[f32], Range<usize>, &mut [f32]) -> Vec<f32> + Sync,
) -> Result<()> {
    const OP: &str = "gemm";
    let &GemmSpec { m, n, k, .. } = spec;
    let a = a.host::<T>(OP)?;
    let out = out.host_mut::<T>(OP)?;
    let mut x = vec![0f32; m * k];
    T::widen(&a[..m * k], &mut x);
    let columns: Vec<Vec<f32>> = (0..n.div_ceil(COLUMNS_PER_TASK))
        .into_par_iter()
        .map_init(
            || vec![0f32; k],
            |row, task| {
                let first = task * COLUMNS_PER_TASK;
                products(&x, first..(first + COLUMNS_PER_TASK).min(n), row)
            },
        )
        .collect();
    for (task, sums) in columns.iter().enumerate() {
        let first = task * COLUMNS_PER_TASK;
        for (c, sums) in sums.chunks_exact(m).enumerate() {
            for (i, &s) in sums.iter().enumerate() {
                let o = &mut out[i * n + first + c];
                let before = if spec.accumulate { o.wide() } else { 0.0 };
                *o = T::narrow(before + s);
            }
        }
    }
    Ok(())
}

/// The products of the rows of `x` (`[m, k]`, f32) with each row of `weights` (`[w, k]`), as
/// `[w, m]`, with `row` (`k` long) to widen a weight row into.
#[inline(always)]
fn products<T: WeightRow>(x: &[f32], weights: &[T], row: &mut [f32]) -> Vec<f32> {
    let k = row.len();
    let m = x.len() / k;
    let mut sums = vec![0f32; weights.len() / k * m];
    for (weight, sums) in weights.chunks_exact(k).zip(sums.chunks_exact_mut(m)) {
        T::dots(x, weight, row, sums);
    }
    sums
}

/// `x . y` in 64 independent lanes (the elements past whole rows of lanes start the first
/// lanes), so that the sums vectorize, each `y` read through `wide`; the lanes are then summed
/// in halves, a vector operation per level, rather than one after another.
#[inline(always)]
pub(crate) fn dot<W: Copy>(x: &[f32], y: &[W], wide: impl Fn(W) -> f32) -> f32 {
    let mut lanes = [0f32; LANES];
    let (xs, ys) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    for (lane, (&a, &b)) in lanes
        .iter_mut()
        .zip(xs.remainder().iter().zip(ys.remainder()))
    {
        *lane = a * wide(b);
    }
    for (x, y) in xs.zip(ys) {
        for l in 0..LANES {
            lanes[l] += x[l] * wide(y[l]);
        }
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            lanes[l] += lanes[l + width];
        }
    }
    lanes[0]
}

/// Lanes of [`dot`].
const LANES: usize = 64;
/// How far ahead of its reads [`dot_avx512`] asks for the weights' lines, in bytes.
#[cfg(target_arch = "x86_64")]
const AHEAD: usize = 4096;

/// A weight element the products read as stored (f32, or bf16 widened in registers).
trait Lanes: Copy + Float<C = f32> {
    /// Elements `at .. at + 16` of `y` as f32 lanes.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, and the 16 elements must be readable.
    #[cfg(target_arch = "x86_64")]
    unsafe fn lanes(y: *const Self) -> std::arch::x86_64::__m512;
}

/// [`WeightRow::dots`] of a weight read as stored: on AVX-512 in four registers, its lines
/// asked for ahead ([`dot_avx512`]); [`dot`] elsewhere.
#[inline(always)]
fn dots_as_stored<W: Lanes>(x: &[f32], weight: &[W], sums: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::ops::elementwise::isa::has_avx512() {
        for (sum, x) in sums.iter_mut().zip(x.chunks_exact(weight.len())) {
            // SAFETY: the CPU has AVX-512F, checked just above; `x` is as long as `weight`.
            *sum = unsafe { dot_avx512(x, weight) };
        }
        return;
    }
    for (sum, x) in sums.iter_mut().zip(x.chunks_exact(weight.len())) {
        *sum = dot(x, weight, Float::load);
    }
}

impl Lanes for f32 {
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn lanes(y: *const Self) -> std::arch::x86_64::__m512 {
        // SAFETY: 16 readable values and AVX-512F (the caller's promise); an unaligned load.
        unsafe { std::arch::x86_64::_mm512_loadu_ps(y) }
    }
}

impl Lanes for bf16 {
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn lanes(y: *const Self) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: 16 readable values and AVX-512F (the caller's promise); an unaligned load;
        // a bf16 value's bits shifted up are its f32 value's.
        unsafe {
            let bits = _mm512_cvtepu16_epi32(_mm256_loadu_si256(y.cast()));
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(bits))
        }
    }
}

/// [`dot`] on AVX-512, its 64 lanes in four registers: the same sums in the same order, so the
/// same value to the bit.
///
/// # Safety
/// The CPU must support AVX-512F, and `y` must be as long as `x`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dot_avx512<W: Lanes>(x: &[f32], y: &[W]) -> f32 {
    use std::arch::x86_64::*;
    let whole = x.len() / LANES * LANES;
    let mut start = [0f32; LANES];
    for (lane, (&a, &b)) in start.iter_mut().zip(x[whole..].iter().zip(&y[whole..])) {
        *lane = a * b.load();
    }
    // SAFETY: `start` holds 64 values; unaligned loads.
    let mut sums: [__m512; 4] =
        std::array::from_fn(|v| unsafe { _mm512_loadu_ps(start.as_ptr().add(16 * v)) });
    let (x, y) = (x.as_ptr(), y.as_ptr());
    let ahead = AHEAD / size_of::<W>();
    for first in (0..whole).step_by(LANES) {
        // The weight rows are read one after another: ask for the lines 4 KiB ahead into L1
        // and 32 KiB ahead into L2, so that the next rows' reads are under way while this
        // row's sums wait.
        for line in (0..LANES).step_by(64 / size_of::<W>()) {
            // A prefetch is a hint: it reads nothing and cannot fault, wherever it points.
            _mm_prefetch::<_MM_HINT_T0>(y.wrapping_add(first + line + ahead).cast::<i8>());
            _mm_prefetch::<_MM_HINT_T1>(y.wrapping_add(first + line + 8 * ahead).cast::<i8>());
        }
        for (v, sum) in sums.iter_mut().enumerate() {
            let at = first + 16 * v;
            // SAFETY: elements `at .. at + 16` lie within both slices (`at + 16 <= whole`);
            // unaligned loads.
            let (a, b) = unsafe { (_mm512_loadu_ps(x.add(at)), W::lanes(y.add(at))) };
            *sum = _mm512_add_ps(*sum, _mm512_mul_ps(a, b));
        }
    }
    // The halves as `dot` sums them: 32 lanes, 16, 8, 4, 2, 1.
    let half = _mm512_add_ps(
        _mm512_add_ps(sums[0], sums[2]),
        _mm512_add_ps(sums[1], sums[3]),
    );
    let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(half)));
    let eight = _mm256_add_ps(_mm512_castps512_ps256(half), high);
    let four = _mm_add_ps(
        _mm256_castps256_ps128(eight),
        _mm256_extractf128_ps::<1>(eight),
    );
    let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)))
}

/// [`products`] in the widest instruction set this CPU has.
fn products_best_isa<T: WeightRow>(x: &[f32], weights: &[T], row: &mut [f32]) -> Vec<f32> {
    in_best_isa(
        #[inline(always)]
        || products(x, weights, row),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_avx512_dot_sums_as_the_portable_one_to_the_bit() {
        #[cfg(target_arch = "x86_64")]
        if crate::ops::elementwise::isa::has_avx512() {
            // Lengths short of the lanes, whole rows of them, and rows with a tail.
            for len in [1, 63, 64, 65, 576, 1000, 3 * 4096 + 7] {
                let x: Vec<f32> = (0..len)
                    .map(|i| ((i * 37) % 101) as f32 / 7.0 - 6.5)
                    .collect();
                let y: Vec<f32> = (0..len)
                    .map(|i| ((i * 53) % 97) as f32 / 3.0 - 15.0)
                    .collect();
                let narrow: Vec<bf16> = y.iter().map(|&v| bf16::from_f32(v)).collect();
                // SAFETY: the CPU has AVX-512F, checked above; the slices are as long.
                let (wide, half) = unsafe { (dot_avx512(&x, &y), dot_avx512(&x, &narrow)) };
                assert_eq!(wide.to_bits(), dot(&x, &y, |w| w).to_bits(), "f32, {len}");
                assert_eq!(
                    half.to_bits(),
                    dot(&x, &narrow, Float::load).to_bits(),
                    "bf16, {len}"
                );
            }
        }
    }
}
