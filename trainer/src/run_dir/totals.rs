//! What a run has done over every process that worked on it: saved with each checkpoint, so
//! that a resumed run's summary covers the whole run, and the steps done again after a kill
//! count once.

use serde::{Deserialize, Serialize};

use crate::planning::TagBytes;
use crate::run_dir::record::StepRecord;

/// A run's totals up to a step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Samples trained on.
    pub samples: u64,
    /// Out-of-memory failures absorbed.
    pub ooms: usize,
    /// Seconds spent in steps and evaluations.
    #[serde(with = "crate::run_dir::float_json")]
    pub seconds: f64,
    /// Seconds spent in training steps alone: the run's throughput is over these.
    #[serde(default, with = "crate::run_dir::float_json")]
    pub train_seconds: f64,
    /// The first step's peak bytes in use.
    pub first_step_peak: Option<u64>,
    /// The most bytes in use in any step.
    pub peak: u64,
    /// The most bytes reserved at once.
    pub peak_reserved: u64,
    /// The most bytes of each tag.
    pub peak_by_tag: Vec<TagBytes>,
    /// The most bytes the host tier held in any step, for a run that offloads to it.
    #[serde(default)]
    pub host_peak: Option<u64>,
    /// The last step's loss.
    #[serde(with = "crate::run_dir::float_json")]
    pub last_loss: f64,
    /// Processes that worked on the run up to this point.
    pub processes: u64,
    /// The latest steps in a row whose loss was NaN or infinite.
    pub nonfinite_streak: u64,
    /// The held-out metric evaluated at the end of the run.
    #[serde(default, with = "crate::run_dir::float_json::option")]
    pub metric: Option<f64>,
}

impl Totals {
    /// Adds a step's record, the samples of its batch (over every rank of a data-parallel
    /// run), and the most bytes reserved during it.
    pub fn add(&mut self, record: &StepRecord, samples: usize, peak_reserved: u64) {
        self.first_step_peak.get_or_insert(record.peak);
        self.samples += samples as u64;
        self.ooms += record.ooms.len();
        self.peak = self.peak.max(record.peak);
        self.peak_reserved = self.peak_reserved.max(peak_reserved);
        if let Some(host) = record.host_peak {
            self.host_peak = Some(self.host_peak.unwrap_or(0).max(host));
        }
        self.last_loss = record.loss;
        self.nonfinite_streak = if record.loss.is_finite() {
            0
        } else {
            self.nonfinite_streak + 1
        };
        for t in &record.tags {
            match self.peak_by_tag.iter_mut().find(|p| p.tag == t.tag) {
                Some(p) => p.peak = p.peak.max(t.peak),
                None => self.peak_by_tag.push(t.clone()),
            }
        }
    }

    /// True when the loss has not been finite for `patience` steps in a row (never with a
    /// patience of 0): the run diverged.
    pub fn diverged(&self, patience: u64) -> bool {
        patience > 0 && self.nonfinite_streak >= patience
    }
}
