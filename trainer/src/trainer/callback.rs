//! Callbacks: code of the user's own around the loop of [`Trainer::run`](super::Trainer::run),
//! as Lightning's and Keras's callbacks are. A callback sees every step's record, every
//! evaluation of the held-out metric, every out-of-memory the step recovered from (with the
//! allocator's report) and every checkpoint written, in that order within a step.
//!
//! Any hook may answer [`Flow::Stop`]. The run then ends cleanly after the step under way, as
//! it ends at its last step: the metric is evaluated, a checkpoint is written (so `--resume`
//! continues from there), and the artifacts and the summary say at which step it stopped. The
//! hooks of the end (the last evaluation and checkpoint) are called too, and their answer no
//! longer matters.

use std::path::Path;

use crate::data::Metric;
use crate::run_dir::record::StepRecord;
use crate::step::Oom;

/// Whether the run goes on after a hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flow {
    /// Go on.
    #[default]
    Continue,
    /// End the run cleanly after this step.
    Stop,
}

impl Flow {
    /// [`Flow::Stop`] when either is.
    pub fn and(self, other: Flow) -> Flow {
        if self == Flow::Stop || other == Flow::Stop {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

/// What a user runs around the training loop. Every hook does nothing by default.
pub trait Callback: Send {
    /// After each step, with the record `metrics.jsonl` gets (its loss, learning rate,
    /// micro-batches, throughput and memory; the metric when the step was evaluated).
    fn after_step(&mut self, record: &StepRecord) -> Flow {
        let _ = record;
        Flow::Continue
    }

    /// After the held-out metric was evaluated at `step`.
    fn after_evaluation(&mut self, step: u64, metric: Metric, value: f64) -> Flow {
        let _ = (step, metric, value);
        Flow::Continue
    }

    /// For each out-of-memory the trainer recovered from in `step` (from 1), with where it
    /// happened and the allocator's report.
    fn on_oom(&mut self, step: u64, oom: &Oom) -> Flow {
        let _ = (step, oom);
        Flow::Continue
    }

    /// After the checkpoint of `step` was written to `path`.
    fn on_checkpoint(&mut self, step: u64, path: &Path) -> Flow {
        let _ = (step, path);
        Flow::Continue
    }
}

/// The callbacks of a run, called in the order they were added.
#[derive(Default)]
pub(crate) struct Callbacks(Vec<Box<dyn Callback>>);

impl Callbacks {
    pub fn push(&mut self, callback: Box<dyn Callback>) {
        self.0.push(callback);
    }

    /// Calls `hook` on every callback (each one, even after one asked to stop) and combines
    /// their answers.
    pub fn each(&mut self, mut hook: impl FnMut(&mut dyn Callback) -> Flow) -> Flow {
        self.0.iter_mut().fold(Flow::Continue, |flow, callback| {
            flow.and(hook(callback.as_mut()))
        })
    }
}
