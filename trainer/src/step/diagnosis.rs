//! What to tell a user when a run cannot fit its limit: not even one sample, or not even the
//! model with its gradients and optimizer state. The diagnosis states what holds the memory;
//! the planner follows it with the changes it planned that fit (`planning/remedies.rs`), a run
//! with [`RUN_SUGGESTION`] ([`with_run_suggestion`]).

use headroom_alloc::{OomReport, format_bytes};
use headroom_kernels::{Device, HOST_TIER};
use headroom_nn::{Optimizer, TrainingMemory, training_memory, training_memory_on};

use crate::model::TrainableModel;

/// What a run that ran out of memory suggests: the planner, which plans each change first.
pub const RUN_SUGGESTION: &str = "suggestion: `headroom plan` with the same settings names the \
     changes that fit, each planned with its micro-batch and both tiers' peaks";

/// `diagnosis` as a run says it: followed by [`RUN_SUGGESTION`].
pub fn with_run_suggestion(diagnosis: impl std::fmt::Display) -> String {
    format!("{diagnosis}\n{RUN_SUGGESTION}")
}

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
/// limit (what its host tier holds named apart), and what the activations held when memory ran
/// out; or, where the host tier ran out, what it held.
pub fn diagnose(
    (model, optimizer): (&dyn TrainableModel, &dyn Optimizer),
    device: &Device,
    report: &OomReport,
    failure: Failure,
) -> String {
    if report.source == HOST_TIER {
        return format!(
            "the host tier ran out of memory: {} held (offloaded activations, streamed weights \
             and optimizer state), {} more asked for, under its {} limit (memory.host_limit, \
             --host-limit)",
            format_bytes(report.in_use),
            format_bytes(report.requested),
            format_bytes(report.limit),
        );
    }
    let memory = training_memory_on(model.module(), Some(optimizer), device);
    let everywhere = training_memory(model.module(), Some(optimizer));
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
    let (weights, gradients, state) = elsewhere(&memory, &everywhere);
    let mut text = format!(
        "{headline} in the {} limit\n\
         \x20 weights           {:>12}{weights}\n\
         \x20 gradients         {:>12}{gradients}\n\
         \x20 optimizer state   {:>12}{state}\n\
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
    if fixed >= limit {
        text.push_str("the model, its gradients and its optimizer state alone exceed the limit");
    } else {
        text.push_str(&format!(
            "{} of the limit is left for activations, too little for one sample",
            format_bytes(limit - fixed)
        ));
    }
    text
}

/// The notes of the weights', gradients' and optimizer state's lines where the device holds
/// only part of them (`on`) and a host tier the rest (`everywhere` less `on`): streamed
/// blocks' weights with their gradients, or an offloaded optimizer's state.
fn elsewhere(on: &TrainingMemory, everywhere: &TrainingMemory) -> (String, String, String) {
    let weights = everywhere.parameters.saturating_sub(on.parameters);
    let gradients = everywhere.gradients.saturating_sub(on.gradients);
    let state = everywhere
        .optimizer_state
        .saturating_sub(on.optimizer_state);
    let weights = match weights {
        0 => String::new(),
        host => format!(
            "  (what stays on the device; the blocks' {} stream from the host tier, a block at \
             a time)",
            format_bytes(host)
        ),
    };
    let gradients = match gradients {
        0 => "  (one per weight, during the step)".into(),
        host => format!(
            "  (one per weight on the device, during the step; the streamed blocks' {} in the \
             host tier)",
            format_bytes(host)
        ),
    };
    let state = match state {
        0 => String::new(),
        host => format!("  (and {} in the host tier)", format_bytes(host)),
    };
    (weights, gradients, state)
}
