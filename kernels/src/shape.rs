//! Shapes: dimensions in row-major order, and NumPy broadcasting.

use smallvec::SmallVec;

use crate::error::{Error, Result};

/// The dimensions of a contiguous, row-major array; rank 0 is a scalar.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(SmallVec<[usize; 6]>);

impl Shape {
    /// A shape with these dimensions.
    pub fn new(dims: &[usize]) -> Self {
        Self(SmallVec::from_slice(dims))
    }

    /// The dimensions.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// Number of elements (1 for a scalar), or `None` if it overflows.
    pub fn checked_numel(&self) -> Option<usize> {
        self.0.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// Number of elements (1 for a scalar); saturates on overflow (see `checked_numel`).
    pub fn numel(&self) -> usize {
        self.checked_numel().unwrap_or(usize::MAX)
    }

    /// Row-major strides, in elements.
    pub fn strides(&self) -> SmallVec<[usize; 6]> {
        let mut strides = SmallVec::from_elem(0, self.rank());
        let mut stride = 1;
        for (s, &d) in strides.iter_mut().zip(&self.0).rev() {
            *s = stride;
            stride *= d;
        }
        strides
    }

    /// The dimension at `axis`, or an error naming `op`.
    pub fn dim(&self, axis: usize, op: &'static str) -> Result<usize> {
        self.0.get(axis).copied().ok_or_else(|| Error::Argument {
            op,
            detail: format!("axis {axis} is out of range for shape {self}"),
        })
    }

    /// The NumPy broadcast of two shapes: dimensions aligned from the right, each pair equal or
    /// one of them 1.
    pub fn broadcast(&self, other: &Shape, op: &'static str) -> Result<Shape> {
        let rank = self.rank().max(other.rank());
        let mut dims = SmallVec::from_elem(0, rank);
        for (i, dim) in dims.iter_mut().enumerate() {
            let a = self.dim_from_right(rank - 1 - i);
            let b = other.dim_from_right(rank - 1 - i);
            *dim = match (a, b) {
                (a, b) if a == b => a,
                (1, b) => b,
                (a, 1) => a,
                _ => {
                    return Err(Error::Shape {
                        op,
                        detail: format!("{self} and {other} do not broadcast"),
                    });
                }
            };
        }
        Ok(Shape(dims))
    }

    /// The dimension `k` places from the right, 1 past the rank.
    fn dim_from_right(&self, k: usize) -> usize {
        if k < self.rank() {
            self.0[self.rank() - 1 - k]
        } else {
            1
        }
    }

    /// Strides for reading this shape while walking `out`, which it broadcasts to: 0 along every
    /// broadcast dimension.
    pub fn broadcast_strides(&self, out: &Shape) -> SmallVec<[usize; 6]> {
        let own = self.strides();
        let offset = out.rank() - self.rank();
        (0..out.rank())
            .map(|i| {
                if i < offset || self.0[i - offset] == 1 {
                    0
                } else {
                    own[i - offset]
                }
            })
            .collect()
    }
}

impl From<&[usize]> for Shape {
    fn from(dims: &[usize]) -> Self {
        Self::new(dims)
    }
}

impl From<Vec<usize>> for Shape {
    fn from(dims: Vec<usize>) -> Self {
        Self::new(&dims)
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(dims: [usize; N]) -> Self {
        Self::new(&dims)
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0.as_slice())
    }
}

impl std::fmt::Debug for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Shape{:?}", self.0.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numel_strides_and_display() {
        let s = Shape::from([2, 3, 4]);
        assert_eq!(s.numel(), 24);
        assert_eq!(s.strides().as_slice(), [12, 4, 1]);
        assert_eq!(Shape::new(&[]).numel(), 1);
        assert_eq!(s.to_string(), "[2, 3, 4]");
        assert_eq!(Shape::from([usize::MAX, 2]).checked_numel(), None);
    }

    #[test]
    fn broadcasting_follows_numpy() {
        let a = Shape::from([4, 1, 3]);
        let b = Shape::from([5, 1]);
        let out = a.broadcast(&b, "add").unwrap();
        assert_eq!(out, Shape::from([4, 5, 3]));
        assert_eq!(a.broadcast_strides(&out).as_slice(), [3, 0, 1]);
        assert_eq!(b.broadcast_strides(&out).as_slice(), [0, 1, 0]);
        let err = Shape::from([2, 3])
            .broadcast(&Shape::from([4]), "mul")
            .unwrap_err();
        assert!(err.to_string().contains("mul") && err.to_string().contains("[2, 3]"));
    }
}
