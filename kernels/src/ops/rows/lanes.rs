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

/// Replaces each `x` of `row` by `f(x)` and returns the sum of the new values, added in the
/// order [`sum_by`] adds them: one pass where a map and [`sum_by`] take two.
#[inline(always)]
pub(crate) fn map_and_sum<C: Compute>(row: &mut [C], f: impl Fn(C) -> C) -> C {
    let mut groups = row.chunks_exact_mut(LANES);
    let mut sums = [C::ZERO; LANES];
    for group in &mut groups {
        for (s, x) in sums.iter_mut().zip(group) {
            *x = f(*x);
            *s = *s + *x;
        }
    }
    let sum = sums.iter().fold(C::ZERO, |s, &x| s + x);
    groups.into_remainder().iter_mut().fold(sum, |s, x| {
        *x = f(*x);
        s + *x
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_and_sum_maps_and_adds_as_a_map_then_sum_by() {
        // Two whole groups and a tail, values whose sum depends on the order it is added in.
        let row: Vec<f32> = (0..37).map(|i| 1.0 / (i as f32 + 0.3)).collect();
        let f = |x: f32| (x * 3.7 - 1.1).exp();
        let mut mapped = row.clone();
        let sum = map_and_sum(&mut mapped, f);
        let want: Vec<f32> = row.iter().map(|&x| f(x)).collect();
        assert_eq!(mapped, want);
        assert_eq!(sum.to_bits(), sum_by(&want, |x| x).to_bits());
    }
}
