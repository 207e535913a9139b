//! `[batch]`: the effective batch and how it is split.

use serde::{Deserialize, Serialize};

use super::Problems;

/// The effective batch and how it is split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchConfig {
    /// Samples per optimizer step.
    pub size: usize,
    /// The first micro-batch size; none: the planner picks it.
    pub micro: Option<usize>,
    /// Clean steps before trying a micro-batch twice as large.
    pub grow_after: u64,
    /// Fraction of the limit the planner keeps free. Unset, [`DEFAULT_MARGIN`](super::DEFAULT_MARGIN), which the
    /// planner shrinks when it is all that stands between the limit and one sample's step.
    pub margin: Option<f64>,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            size: 128,
            micro: None,
            grow_after: 100,
            margin: None,
        }
    }
}

impl BatchConfig {
    /// The problems of the batch's settings.
    pub(super) fn check(&self, problems: &mut Problems) {
        problems.check(self.size > 0, "batch.size: 0 samples per step".into());
        if let Some(micro) = self.micro {
            problems.check(
                micro > 0 && micro <= self.size,
                format!(
                    "batch.micro: {micro} is not between 1 and the batch size {}",
                    self.size
                ),
            );
        }
        if let Some(margin) = self.margin {
            problems.check(
                (0.0..0.9).contains(&margin),
                format!("batch.margin: {margin} is not in [0, 0.9)"),
            );
        }
        problems.check(
            self.grow_after > 0,
            "batch.grow_after: at least 1 clean step".into(),
        );
    }
}
