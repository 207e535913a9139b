//! Mixed precision: the autocast policy of a precision, and the dynamic loss scaler of f16.

use headroom_autograd::{AutocastGuard, autocast};
use headroom_kernels::DType;
use serde::{Deserialize, Serialize};

use crate::config::{PrecisionConfig, PrecisionKind};

impl PrecisionKind {
    /// The autocast scope of this precision (none for f32).
    pub fn autocast(self) -> Option<AutocastGuard> {
        self.half_dtype().map(autocast)
    }

    /// The half type its products run in (none for f32).
    pub fn half_dtype(self) -> Option<DType> {
        match self {
            PrecisionKind::F32 => None,
            PrecisionKind::Bf16 => Some(DType::BF16),
            PrecisionKind::F16 => Some(DType::F16),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            PrecisionKind::F32 => "f32",
            PrecisionKind::Bf16 => "bf16",
            PrecisionKind::F16 => "f16",
        }
    }
}

/// Dynamic loss scaling as `torch.amp.GradScaler` does it: the loss's gradient is multiplied by
/// the scale so that small f16 gradients do not flush to zero; a step whose gradients overflow
/// is skipped and the scale shrinks; after a run of clean steps it grows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossScaler {
    /// The current scale (1 and fixed when scaling is off).
    pub scale: f64,
    /// Clean steps since the last change.
    pub clean: u64,
    enabled: bool,
    growth_interval: u64,
    growth_factor: f64,
    backoff_factor: f64,
}

/// What the scaler did after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleChange {
    /// Nothing.
    Kept,
    /// Grew after a run of clean steps.
    Grew,
    /// Shrank: the step's gradients overflowed and it was skipped.
    Backoff,
}

impl LossScaler {
    /// The scaler for `config`: on for f16 only.
    pub fn new(config: &PrecisionConfig) -> Self {
        let enabled = config.dtype == PrecisionKind::F16;
        Self {
            scale: if enabled { config.loss_scale } else { 1.0 },
            clean: 0,
            enabled,
            growth_interval: config.growth_interval,
            growth_factor: config.growth_factor,
            backoff_factor: config.backoff_factor,
        }
    }

    /// True when scaling is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Records a step: `finite` when every gradient was finite.
    pub fn update(&mut self, finite: bool) -> ScaleChange {
        if !self.enabled {
            return ScaleChange::Kept;
        }
        if !finite {
            self.scale = (self.scale * self.backoff_factor).max(1.0);
            self.clean = 0;
            return ScaleChange::Backoff;
        }
        self.clean += 1;
        if self.clean >= self.growth_interval {
            self.scale *= self.growth_factor;
            self.clean = 0;
            return ScaleChange::Grew;
        }
        ScaleChange::Kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_halves_on_overflow_and_doubles_after_clean_steps() {
        let config = PrecisionConfig {
            dtype: PrecisionKind::F16,
            growth_interval: 3,
            ..Default::default()
        };
        let mut scaler = LossScaler::new(&config);
        assert_eq!(scaler.scale, 65536.0);
        assert_eq!(scaler.update(false), ScaleChange::Backoff);
        assert_eq!(scaler.scale, 32768.0);
        assert_eq!(scaler.update(true), ScaleChange::Kept);
        assert_eq!(scaler.update(true), ScaleChange::Kept);
        assert_eq!(scaler.update(true), ScaleChange::Grew);
        assert_eq!(scaler.scale, 65536.0);
        let mut off = LossScaler::new(&PrecisionConfig::default());
        assert_eq!((off.update(false), off.scale), (ScaleChange::Kept, 1.0));
    }
}
