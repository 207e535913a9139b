//! The shape rules that can fail, with the crate's [`Error`]: an axis within the rank, and NumPy
//! broadcasting (with the strides an operand is read through when broadcast).

use smallvec::SmallVec;

use super::Shape;
use crate::error::{Error, Result};

impl Shape {
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

#[cfg(test)]
mod tests {
    use super::*;

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
