//! One optimizer step over an effective batch, in micro-batches that adapt to memory.
//!
//! Each micro-batch's loss is weighted by its share of the batch's scored targets (of its samples,
//! for data without U32 targets: [`HostBatch::scored`](crate::data::HostBatch::scored)), so the
//! accumulated gradient is the full batch's. Each parameter's gradient is added into the step's
//! accumulated one as soon as the backward pass completes it, so a step in several micro-batches
//! holds one set of gradients plus one parameter's, not two sets. An out-of-memory in a
//! micro-batch's forward or backward pass drops that micro-batch (its tape, activations and
//! gradients), halves the size and redoes only the samples not yet done, keeping what earlier
//! micro-batches accumulated; when the failed micro-batch had already added a gradient into the
//! step's (a sum in place, which cannot be taken back), the step starts over from its first sample
//! instead, so that its result is always that of the micro-batches it reports, bit for bit. An
//! out-of-memory around the optimizer update releases cached memory and retries once. Each absorbed
//! out-of-memory is logged with its verdict (fragmentation or capacity), the request and the
//! largest free block. Growing the micro-batch again is the caller's decision
//! ([`MicroBatcher::finished`]), made after the step.
//!
//! With the optimizer step in the backward pass (`optimizer.in_backward`), a step whose first
//! micro-batch is the whole batch updates each parameter as its gradient completes, under the
//! contract of [`in_backward`]; a step cut in several micro-batches accumulates and
//! updates after, as above.
//!
//! The folder holds the step and what it works with: its context (`context.rs`), the
//! micro-batch size and when it may grow (`micro.rs`; the probe that lets it grow is the
//! planner's), the update inside the backward pass, mixed precision's loss scaler, the
//! optimizer and schedule a configuration describes (`optimizer.rs`), and what holds the memory
//! when a step cannot fit (`diagnosis.rs`).

pub(crate) mod context;
pub(crate) mod diagnosis;
pub mod in_backward;
pub(crate) mod micro;
pub(crate) mod optimizer;
pub(crate) mod precision;
pub(crate) mod report;
pub(crate) mod train_step;

pub use diagnosis::{Failure, RUN_SUGGESTION, diagnose};
pub use micro::{Change, MicroBatcher, SizeChange};
pub use precision::{LossScaler, ScaleChange};
pub use report::{Oom, Phase, StepReport};

#[cfg(test)]
mod accumulation_tests;
