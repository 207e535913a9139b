//! Shapes: dimensions in row-major order. The type sits below the crate's error (which names
//! shapes); the checks that fail with that error, and NumPy broadcasting, are in `checks`.

mod checks;

use smallvec::SmallVec;

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
}
