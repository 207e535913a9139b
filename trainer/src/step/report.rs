//! What a step reports: its loss and counts, the micro-batches it ran, and each out-of-memory it
//! recovered from, with the phase of the step it struck in.

use headroom_alloc::{OomReport, format_bytes};
use headroom_autograd::SavedReport;
use serde::{Deserialize, Serialize};

use crate::step::precision::ScaleChange;

/// Where in a step memory ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// A micro-batch's forward or backward pass, or the accumulation of its gradients.
    MicroBatch,
    /// Summing the gradients over the ranks of a data-parallel run: a bucket that did not fit,
    /// summed in place instead.
    Gradients,
    /// Clipping and the optimizer update.
    Optimizer,
}

/// An out-of-memory the step absorbed.
#[derive(Debug, Clone)]
pub struct Oom {
    /// The micro-batch size that did not fit (or this rank's batch, for the other phases).
    pub micro: usize,
    /// Where.
    pub phase: Phase,
    /// The allocator's report.
    pub report: Box<OomReport>,
}

/// What a step did.
#[derive(Debug, Clone)]
pub struct StepReport {
    /// The batch's mean loss.
    pub loss: f64,
    /// Samples in the batch.
    pub samples: usize,
    /// Scored targets in the batch (tokens, for a GPT).
    pub scored: usize,
    /// The micro-batch sizes that completed, in order.
    pub micro_sizes: Vec<usize>,
    /// The dataset indices of the samples trained on, in the order their micro-batches
    /// completed: each sample of the batch exactly once, whatever failed in between.
    pub indices: Vec<usize>,
    /// Out-of-memory failures absorbed.
    pub ooms: Vec<Oom>,
    /// Out-of-memory failures of other ranks that this rank shrank its micro-batches for (a
    /// data-parallel run).
    pub peer_ooms: usize,
    /// The gradients overflowed (f16): the update was skipped.
    pub skipped: bool,
    /// The gradients' global norm (after unscaling).
    pub grad_norm: f64,
    /// What the loss scaler did.
    pub scale_change: ScaleChange,
    /// What the forward pass of the step's largest micro-batch saved for its backward pass.
    pub saved: SavedReport,
}

/// An out-of-memory in a few words: its verdict, the request and the largest free block.
pub(crate) fn describe(report: &OomReport) -> String {
    format!(
        "{} out of memory ({} requested for {}, largest free block {})",
        report.verdict,
        format_bytes(report.requested),
        report.tag,
        format_bytes(report.largest_free)
    )
}
