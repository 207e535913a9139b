//! The arithmetic of one row of the fused cross-entropy, written so that it vectorizes: the
//! row's maximum and its sum of exponentials run in independent accumulators
//! ([`crate::ops::rows::lanes`]), and the loops are compiled for the
//! widest instruction set the CPU has (see [`crate::ops::elementwise::isa`]).

use crate::dtype::{Compute, Float};
use crate::ops::elementwise::isa::{has_avx2, has_avx512};
use crate::ops::rows::lanes::{max_by, sum_by};

/// The largest element of a row (NaN-propagating) and `sum_j exp(row[j] - max)`, in the
/// compute type.
#[inline(always)]
fn max_and_sum_exp<T: Float>(row: &[T]) -> (T::C, T::C) {
    let max = max_by(row, |x: T| x.load());
    (max, sum_by(row, |x: T| (x.load() - max).exp()))
}

/// The loss of one row against its target: `(max - x_t) + ln(sum_j exp(x_j - max))`.
#[inline(always)]
fn row_loss<T: Float>(row: &[T], target: usize) -> f64 {
    let (max, sum) = max_and_sum_exp::<T>(row);
    // (max - x_t) + ln(sum): no cancellation between two large logits' sums.
    ((max - row[target].load()) + sum.ln()).f64()
}

/// The gradient of one row's loss, times `scale`: `(softmax(row) - onehot(target)) * scale`.
#[inline(always)]
fn row_grad<T: Float>(dx: &mut [T], row: &[T], target: usize, scale: T::C) {
    let (max, sum) = max_and_sum_exp::<T>(row);
    let inv = T::C::ONE / sum;
    let row = &row[..dx.len()];
    for (d, &x) in dx.iter_mut().zip(row) {
        *d = T::store((x.load() - max).exp() * inv * scale);
    }
    let p = (row[target].load() - max).exp() * inv;
    dx[target] = T::store((p - T::C::ONE) * scale);
}

/// [`row_loss`] compiled for AVX2 and FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_loss_avx2<T: Float>(row: &[T], target: usize) -> f64 {
    row_loss(row, target)
}

/// [`row_loss`] compiled for AVX-512 (with AVX2 and FMA).
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn row_loss_avx512<T: Float>(row: &[T], target: usize) -> f64 {
    row_loss(row, target)
}

/// [`row_grad`] compiled for AVX2 and FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_grad_avx2<T: Float>(dx: &mut [T], row: &[T], target: usize, scale: T::C) {
    row_grad(dx, row, target, scale);
}

/// [`row_grad`] compiled for AVX-512 (with AVX2 and FMA).
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn row_grad_avx512<T: Float>(dx: &mut [T], row: &[T], target: usize, scale: T::C) {
    row_grad(dx, row, target, scale);
}

/// The loss of one row (its `classes` columns) against `target`, in the widest instruction
/// set this CPU has.
pub(super) fn row_loss_best_isa<T: Float>(row: &[T], target: usize) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU supports AVX-512F, AVX2 and FMA, checked just above.
        return unsafe { row_loss_avx512(row, target) };
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 and FMA, checked just above.
        return unsafe { row_loss_avx2(row, target) };
    }
    row_loss(row, target)
}

/// The gradient of one row's loss times `scale` into `dx` (as long as the row's `classes`
/// columns), in the widest instruction set this CPU has.
pub(super) fn row_grad_best_isa<T: Float>(dx: &mut [T], row: &[T], target: usize, scale: T::C) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU supports AVX-512F, AVX2 and FMA, checked just above.
        unsafe { row_grad_avx512(dx, row, target, scale) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 and FMA, checked just above.
        unsafe { row_grad_avx2(dx, row, target, scale) };
        return;
    }
    row_grad(dx, row, target, scale);
}

/// One row of a vocabulary's slice: its log-sum-exp, and its target's logit where the target
/// lies in the slice (0 elsewhere).
#[inline(always)]
pub(super) fn slice_parts<T: Float>(row: &[T], target: usize) -> (T::C, T::C) {
    let (max, sum) = max_and_sum_exp::<T>(row);
    let picked = row.get(target).map_or(T::C::ZERO, |x| x.load());
    (max + sum.ln(), picked)
}

/// The gradient of one row of a vocabulary's slice against the whole vocabulary's
/// log-sum-exp `lse`, times `scale`: `(exp(row - lse) - onehot(target)) * scale`, no onehot
/// where the target lies in another slice.
#[inline(always)]
pub(super) fn slice_grad<T: Float>(dx: &mut [T], row: &[T], target: usize, lse: T::C, scale: T::C) {
    for (d, &x) in dx.iter_mut().zip(row) {
        *d = T::store((x.load() - lse).exp() * scale);
    }
    if let Some(&x) = row.get(target) {
        dx[target] = T::store(((x.load() - lse).exp() - T::C::ONE) * scale);
    }
}
