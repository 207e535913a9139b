//! One sample as a dataset gives it: the values of each of its arrays, in the order of the
//! dataset's [`DataShape`](super::DataShape).

use super::values::Values;

/// A sample's arrays, in the order of its dataset's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    arrays: Vec<Values>,
}

impl Sample {
    /// A sample of these arrays' values, in the order of the dataset's shape.
    pub fn new(arrays: Vec<Values>) -> Self {
        Self { arrays }
    }

    /// A token sequence and the next token at each position ([`IGNORE`](super::IGNORE) where
    /// not scored), for [`DataShape::tokens`](super::DataShape::tokens).
    pub fn tokens(ids: Vec<u32>, targets: Vec<u32>) -> Self {
        Self::new(vec![ids.into(), targets.into()])
    }

    /// A feature vector and its class, for [`DataShape::features`](super::DataShape::features).
    pub fn features(values: Vec<f32>, class: u32) -> Self {
        Self::new(vec![values.into(), vec![class].into()])
    }

    /// The arrays' values.
    pub fn arrays(&self) -> &[Values] {
        &self.arrays
    }
}
