//! A row's maximum and sum in `LANES` independent accumulators, so that the loops vectorize:
//! a fixed order, so that the result does not depend on the machine. The accumulators are
//! combined first, then the tail that fills no whole group.

use crate::dtype::Compute;

/// Independent accumulators of a row's maximum and sum.
pub(crate) const LANES: usize = 16;

/// The largest `f(x)` over `row` (NaN if one is).
#[inline(always)]
pub(crate) fn max_by<X: Copy, C: Compute>(row: &[X], f: impl Fn(X) -> C) -> C {
    let groups = row.chunks_exact(LANES);
    let tail = groups.remainder();
    let mut maxes = [C::NEG_INFINITY; LANES];
    for group in groups {
        for (m, &x) in maxes.iter_mut().zip(group) {
            *m = m.max(f(x));
        }
    }
    let max = maxes.iter().fold(C::NEG_INFINITY, |m, &x| m.max(x));
    tail.iter().fold(max, |m, &x| m.max(f(x)))
}

/// The sum of `f(x)` over `row`.
#[inline(always)]
pub(crate) fn sum_by<X: Copy, C: Compute>(row: &[X], f: impl Fn(X) -> C) -> C {
    let groups = row.chunks_exact(LANES);
    let tail = groups.remainder();
    let mut sums = [C::ZERO; LANES];
    for group in groups {
        for (s, &x) in sums.iter_mut().zip(group) {
            *s = *s + f(x);
        }
    }
    let sum = sums.iter().fold(C::ZERO, |s, &x| s + x);
    tail.iter().fold(sum, |s, &x| s + f(x))
}
