//! Learning-rate schedules.

use crate::error::{Error, Result};

/// A learning rate as a function of the step (counted from 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LrSchedule {
    /// The same rate every step.
    Constant(f64),
    /// Linear warmup from 0 to `peak` over `warmup` steps, then cosine decay to `min` at
    /// `total`, and `min` after.
    WarmupCosine {
        /// The rate at the end of the warmup.
        peak: f64,
        /// The last rate.
        min: f64,
        /// Steps of warmup.
        warmup: u64,
        /// Steps in all.
        total: u64,
    },
}

impl LrSchedule {
    /// Checks that the numbers make a schedule.
    pub fn validate(&self) -> Result<()> {
        let bad = |detail: String| Err(Error::config("learning-rate schedule", detail));
        match *self {
            LrSchedule::Constant(lr) if !(lr.is_finite() && lr >= 0.0) => {
                bad(format!("rate {lr} is not a finite number >= 0"))
            }
            LrSchedule::WarmupCosine {
                peak,
                min,
                warmup,
                total,
            } => {
                if !(peak.is_finite() && min.is_finite() && 0.0 <= min && min <= peak) {
                    bad(format!(
                        "rates must satisfy 0 <= min ({min}) <= peak ({peak})"
                    ))
                } else if warmup > total {
                    bad(format!("{warmup} warmup steps exceed {total} steps in all"))
                } else {
                    Ok(())
                }
            }
            LrSchedule::Constant(_) => Ok(()),
        }
    }

    /// The rate at `step`.
    ///
    /// ```
    /// use headroom_nn::LrSchedule;
    /// let s = LrSchedule::WarmupCosine { peak: 1.0, min: 0.0, warmup: 10, total: 110 };
    /// assert_eq!(s.at(0), 0.1);
    /// assert_eq!(s.at(9), 1.0);
    /// assert!((s.at(60) - 0.5).abs() < 1e-12); // half way down the cosine
    /// assert_eq!(s.at(500), 0.0);
    /// ```
    pub fn at(&self, step: u64) -> f64 {
        match *self {
            LrSchedule::Constant(lr) => lr,
            LrSchedule::WarmupCosine {
                peak,
                min,
                warmup,
                total,
            } => {
                if step < warmup {
                    peak * (step + 1) as f64 / warmup as f64
                } else if step >= total {
                    min
                } else {
                    let span = (total - warmup).max(1) as f64;
                    let progress = (step - warmup) as f64 / span;
                    min + 0.5 * (peak - min) * (1.0 + (std::f64::consts::PI * progress).cos())
                }
            }
        }
    }
}
