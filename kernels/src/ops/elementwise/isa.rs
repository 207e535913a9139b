//! The loops every contiguous elementwise kernel runs, compiled for the widest instruction set
//! the CPU has: builds target the x86-64 baseline, so AVX-512 and AVX2 (with FMA) versions of
//! each loop are picked at run time. The versions compute the same values bit for bit (the
//! compiler contracts nothing into fused multiply-adds on its own); they only run more lanes.

use crate::dtype::Float;

/// `out[i] = f(a[i], b[i])` over equal-length slices: the loop every contiguous kernel runs.
#[inline(always)]
fn zip_with<T: Float, F: Fn(T::C, T::C) -> T::C>(out: &mut [T], a: &[T], b: &[T], f: &F) {
    // Equal lengths up front let the compiler drop bounds checks and vectorize.
    let (a, b) = (&a[..out.len()], &b[..out.len()]);
    for i in 0..out.len() {
        out[i] = T::store(f(a[i].load(), b[i].load()));
    }
}

/// [`zip_with`] compiled for AVX2 and FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn zip_with_avx2<T: Float, F: Fn(T::C, T::C) -> T::C>(
    out: &mut [T],
    a: &[T],
    b: &[T],
    f: &F,
) {
    zip_with(out, a, b, f);
}

/// [`zip_with`] compiled for AVX-512 (with AVX2 and FMA).
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn zip_with_avx512<T: Float, F: Fn(T::C, T::C) -> T::C>(
    out: &mut [T],
    a: &[T],
    b: &[T],
    f: &F,
) {
    zip_with(out, a, b, f);
}

/// `b[i] = f(a[i], b[i])` over equal-length slices.
#[inline(always)]
fn assign_with<T: Float, F: Fn(T::C, T::C) -> T::C>(b: &mut [T], a: &[T], f: &F) {
    let a = &a[..b.len()];
    for i in 0..b.len() {
        b[i] = T::store(f(a[i].load(), b[i].load()));
    }
}

/// [`assign_with`] compiled for AVX2 and FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn assign_with_avx2<T: Float, F: Fn(T::C, T::C) -> T::C>(b: &mut [T], a: &[T], f: &F) {
    assign_with(b, a, f);
}

/// [`assign_with`] compiled for AVX-512 (with AVX2 and FMA).
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn assign_with_avx512<T: Float, F: Fn(T::C, T::C) -> T::C>(b: &mut [T], a: &[T], f: &F) {
    assign_with(b, a, f);
}

/// [`assign_with`] in the widest instruction set this CPU has.
#[inline(always)]
pub(super) fn assign_with_best_isa<T: Float, F: Fn(T::C, T::C) -> T::C>(
    b: &mut [T],
    a: &[T],
    f: &F,
) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU supports AVX-512F, AVX2 and FMA, checked just above.
        unsafe { assign_with_avx512(b, a, f) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 and FMA, checked just above.
        unsafe { assign_with_avx2(b, a, f) };
        return;
    }
    assign_with(b, a, f);
}

/// [`zip_with`] in the widest instruction set this CPU has (detected at run time, since builds
/// target the baseline).
#[inline(always)]
pub(super) fn zip_with_best_isa<T: Float, F: Fn(T::C, T::C) -> T::C>(
    out: &mut [T],
    a: &[T],
    b: &[T],
    f: &F,
) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU supports AVX-512F, AVX2 and FMA, checked just above.
        unsafe { zip_with_avx512(out, a, b, f) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 and FMA, checked just above.
        unsafe { zip_with_avx2(out, a, b, f) };
        return;
    }
    zip_with(out, a, b, f);
}

/// `f` compiled for the widest instruction set this CPU has, so that its loops vectorize as
/// wide as the CPU allows: pass a closure marked `#[inline(always)]`, which is then compiled
/// inside each version. Like the loops above, the values are the same in every version.
#[inline(always)]
pub(crate) fn in_best_isa<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() && std::arch::is_x86_feature_detected!("avx512dq") {
        // SAFETY: the CPU supports AVX-512F and DQ, AVX2 and FMA, checked just above.
        return unsafe { in_avx512(f) };
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2 and FMA, checked just above.
        return unsafe { in_avx2(f) };
    }
    f()
}

/// [`in_best_isa`] on AVX-512 (DQ for 64-bit integer products, as random draws take).
///
/// # Safety
/// The CPU must support AVX-512F and DQ, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
unsafe fn in_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// [`in_best_isa`] on AVX2.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn in_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// True when the CPU has AVX2 and FMA (detected once, then cached by `std`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// True when the CPU has AVX-512F besides AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f") && has_avx2()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::kernels::{BinaryOp, UnaryOp};

    /// Inputs across exp's and tanh's ranges, with the edges: infinities, NaN, zeros, subnormals.
    fn inputs() -> Vec<f32> {
        let mut x: Vec<f32> = (0..4099).map(|i| (i as f32 - 2049.0) * 0.0625).collect();
        x.extend([
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            0.0,
            -0.0,
            1e-40,
            -1e-40,
            89.0,
        ]);
        x
    }

    fn bits(values: &[f32]) -> Vec<u32> {
        values.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn every_instruction_set_computes_the_baseline_bit_for_bit() {
        let x = inputs();
        let y: Vec<f32> = x.iter().rev().copied().collect();
        type Op<'a> = &'a dyn Fn(f32, f32) -> f32;
        let ops: [(&str, Op); 5] = [
            ("exp", &|a, _| UnaryOp::Exp.apply(a)),
            ("gelu", &|a, _| UnaryOp::Gelu.apply(a)),
            ("tanh", &|a, _| UnaryOp::Tanh.apply(a)),
            ("gelu_backward", &|a, b| BinaryOp::GeluBackward.apply(a, b)),
            ("div", &|a, b| BinaryOp::Div.apply(a, b)),
        ];
        for (name, op) in ops {
            let mut want = vec![0f32; x.len()];
            zip_with(&mut want, &x, &y, &op);
            let mut assigned = y.clone();
            assign_with(&mut assigned, &x, &op);
            assert_eq!(bits(&assigned), bits(&want), "{name}: assign_with");
            #[cfg(target_arch = "x86_64")]
            {
                let mut checked = 0;
                if has_avx2() {
                    let mut got = vec![0f32; x.len()];
                    // SAFETY: the CPU supports AVX2 and FMA, checked just above.
                    unsafe { zip_with_avx2(&mut got, &x, &y, &op) };
                    assert_eq!(bits(&got), bits(&want), "{name}: AVX2");
                    checked += 1;
                }
                if has_avx512() {
                    let mut got = vec![0f32; x.len()];
                    // SAFETY: the CPU supports AVX-512F, AVX2 and FMA, checked just above.
                    unsafe { zip_with_avx512(&mut got, &x, &y, &op) };
                    assert_eq!(bits(&got), bits(&want), "{name}: AVX-512");
                    let mut assigned = y.clone();
                    // SAFETY: as above.
                    unsafe { assign_with_avx512(&mut assigned, &x, &op) };
                    assert_eq!(bits(&assigned), bits(&want), "{name}: AVX-512 assign");
                    checked += 1;
                }
                eprintln!("{name}: {checked} instruction sets beside the baseline");
            }
        }
    }
}
