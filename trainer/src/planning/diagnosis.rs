//! What to tell a user when a run cannot fit its limit: not even one sample, or not even the
//! model with its gradients and optimizer state.

use headroom_alloc::{OomReport, format_bytes};
use headroom_kernels::{Device, HOST_TIER};
use headroom_nn::{Optimizer, training_memory_on};

use super::bf16_remedy::bf16_remedy;
use crate::model::TrainableModel;

/// What could not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A micro-batch of one sample ran out of memory.
    OneSample,
    /// Building the model or its optimizer, restoring a checkpoint, or the optimizer update
    /// ran out of memory.
    TrainingState,
}

/// Per tag, what the model, its gradients and its optimizer state need on `device` against the
/// limit (what its host tier holds apart), what the activations held when memory ran out, and
/// what to do. `one_sample_peak` is the peak of a step with one sample when known (the planner
/// measures it on an unlimited meta device).
pub fn diagnose(
    (model, optimizer): (&dyn TrainableModel, &dyn Optimizer),
    device: &Device,
    report: &OomReport,
    failure: Failure,
    one_sample_peak: Option<u64>,
) -> String {
    if report.source == HOST_TIER {
        return format!(
            "the host tier ran out of memory: {} held (offloaded activations and optimizer \
             state), {} more asked for, under its {} limit\nsuggestion: raise \
             memory.host_limit (--host-limit), or unset it for the machine's memory; `headroom \
             plan` predicts the host tier's peak",
            format_bytes(report.in_use),
            format_bytes(report.requested),
            format_bytes(report.limit),
        );
    }
    let memory = training_memory_on(model.module(), Some(optimizer), device);
    // Every kind of activation (attention's, the MLP's, ...) counts.
    let activations: u64 = report
        .tags
        .iter()
        .filter(|t| t.tag.is_activations())
        .map(|t| t.live)
        .sum();
    let fixed = memory.total();
    let limit = report.limit;
    let headline = match failure {
        Failure::OneSample => "not even a micro-batch of one sample fits",
        Failure::TrainingState => "the model, its gradients and its optimizer state do not fit",
    };
    let mut text = format!(
        "{headline} in the {} limit\n\
         \x20 weights           {:>12}\n\
         \x20 gradients         {:>12}  (one per weight, during the step)\n\
         \x20 optimizer state   {:>12}\n\
         \x20 together          {:>12}  of the {} limit\n\
         \x20 activations held  {:>12}  when the last allocation ({} for {}) failed\n",
        format_bytes(limit),
        format_bytes(memory.parameters),
        format_bytes(memory.gradients),
        format_bytes(memory.optimizer_state),
        format_bytes(fixed),
        format_bytes(limit),
        format_bytes(activations),
        format_bytes(report.requested),
        report.tag,
    );
    let raise = match one_sample_peak {
        Some(peak) => format!(
            "one sample's step peaks at {}: raise --memory-limit to at least that (plus the \
             planner's margin)",
            format_bytes(peak)
        ),
        None => "raise --memory-limit (`headroom plan` measures what one sample needs)".into(),
    };
    let suggestion = if fixed >= limit {
        let bf16 = bf16_remedy(model, optimizer, &memory, limit).unwrap_or_default();
        format!(
            "the model, its gradients and its optimizer state alone exceed the limit; {raise}, \
             or make the model smaller{bf16}"
        )
    } else {
        let recompute = if model.could_recompute() {
            "recompute the blocks in the backward pass (--recompute), "
        } else {
            ""
        };
        format!(
            "{} is left for activations, too little for one sample; {raise}, run the products \
             in --precision bf16, {recompute}shorten the sequences, or make the model narrower",
            format_bytes(limit - fixed),
        )
    };
    text.push_str("suggestion: ");
    text.push_str(&suggestion);
    text
}
