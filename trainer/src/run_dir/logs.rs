//! The logs a run appends each step's record to: `metrics.jsonl`, and the same values as
//! scalars in its TensorBoard event file.

use std::path::Path;

use crate::error::Result;
use crate::run_dir::metrics::MetricsLog;
use crate::run_dir::record::StepRecord;
use crate::run_dir::tensorboard::EventLog;

/// `metrics.jsonl` and this process's event file.
pub struct RunLogs {
    metrics: MetricsLog,
    events: EventLog,
}

impl RunLogs {
    /// The logs of a run in `dir`: new ones, or for a run resumed from its checkpoint at step
    /// `resumed_from`, `metrics.jsonl` cut back to that step and a new event file that marks
    /// the restart. `metric_name` names the held-out metric's tag.
    pub fn open(dir: &Path, resumed_from: Option<u64>, metric_name: &str) -> Result<Self> {
        let metrics = match resumed_from {
            Some(step) => MetricsLog::resume(dir, step)?,
            None => MetricsLog::create(dir)?,
        };
        let events = EventLog::create(dir, resumed_from, metric_name)?;
        Ok(Self { metrics, events })
    }

    /// Appends `record` to both.
    pub fn append(&mut self, record: &StepRecord) -> Result<()> {
        self.metrics.append(record)?;
        self.events.append(record)
    }

    /// Records the held-out metric evaluated at the run's end, after `step`; `summary.json`
    /// keeps it in place of a line of `metrics.jsonl`.
    pub fn final_evaluation(&mut self, step: u64, metric: f64) -> Result<()> {
        self.events.evaluation(step, metric)
    }
}
