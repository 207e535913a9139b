//! `[precision]`: mixed precision and loss scaling.

use serde::{Deserialize, Serialize};

use super::Problems;

/// Mixed precision and loss scaling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrecisionConfig {
    /// `f32`, `bf16` or `f16` for matrix products (weights stay f32).
    pub dtype: PrecisionKind,
    /// f16: the first loss scale.
    pub loss_scale: f64,
    /// f16: clean steps before the scale grows.
    pub growth_interval: u64,
    /// f16: the growth factor.
    pub growth_factor: f64,
    /// f16: the factor on an overflow.
    pub backoff_factor: f64,
}

impl Default for PrecisionConfig {
    fn default() -> Self {
        Self {
            dtype: PrecisionKind::F32,
            loss_scale: 65536.0,
            growth_interval: 2000,
            growth_factor: 2.0,
            backoff_factor: 0.5,
        }
    }
}

/// The precisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PrecisionKind {
    /// Everything in f32.
    F32,
    /// Products in bf16 (no loss scaling needed).
    Bf16,
    /// Products in f16, with dynamic loss scaling.
    F16,
}

impl PrecisionConfig {
    /// The problems of the loss scaling's settings, which only f16 uses.
    pub(super) fn check(&self, problems: &mut Problems) {
        if self.dtype != PrecisionKind::F16 {
            return;
        }
        problems.check(
            self.loss_scale >= 1.0,
            format!("precision.loss_scale: {} is below 1", self.loss_scale),
        );
        problems.check(
            self.growth_factor > 1.0 && self.backoff_factor > 0.0 && self.backoff_factor < 1.0,
            format!(
                "precision: growth factor {} must exceed 1 and backoff factor {} be in (0, 1)",
                self.growth_factor, self.backoff_factor
            ),
        );
        problems.check(
            self.growth_interval > 0,
            "precision.growth_interval: at least 1 step".into(),
        );
    }
}
