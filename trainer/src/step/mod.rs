//! One optimizer step over an effective batch, in micro-batches that adapt to memory.
//!
//! Each micro-batch's loss is weighted by its share of the batch's scored targets (of its
//! samples, for data without U32 targets: [`HostBatch::scored`]), so the accumulated gradient
//! is the full batch's. Each parameter's gradient is added into the step's accumulated one as
//! soon as the backward pass completes it, so a step in several micro-batches holds one set of
//! gradients plus one parameter's, not two sets. An out-of-memory in a micro-batch's forward or
//! backward pass drops that micro-batch (its tape, activations and gradients), halves the size
//! and redoes only the samples not yet done, keeping what earlier micro-batches accumulated; when
//! the failed micro-batch had already added a gradient into the step's (a sum in place, which
//! cannot be taken back), the step starts over from its first sample instead, so that its
//! result is always that of the micro-batches it reports, bit for bit. An out-of-memory around
//! the optimizer update releases cached memory and retries once.
//! Each absorbed out-of-memory is logged with its verdict (fragmentation or capacity), the
//! request and the largest free block. Growing the micro-batch again is the caller's decision
//! ([`MicroBatcher::finished`]), made after the step.
//!
//! With the optimizer step in the backward pass (`optimizer.in_backward`), a step whose first
//! micro-batch is the whole batch updates each parameter as its gradient completes, under the
//! contract of [`in_backward`]; a step cut in several micro-batches accumulates and
//! updates after, as above.
//!
//! The folder holds the step and what it works with: its context (`context.rs`), the
//! micro-batch size and when it may grow (`micro.rs`, `micro_growth.rs`), the update inside the
//! backward pass, mixed precision's loss scaler, and the optimizer and schedule a configuration
//! describes (`optimizer.rs`).

pub(crate) mod context;
pub mod in_backward;
pub(crate) mod micro;
pub(crate) mod micro_growth;
pub(crate) mod optimizer;
pub(crate) mod precision;

pub use micro::{Change, MicroBatcher, SizeChange};
pub use precision::{LossScaler, ScaleChange};

use headroom_alloc::{OomReport, format_bytes};
use headroom_autograd::{Gradients, SavedReport};
use headroom_collectives::ReduceOp;
use headroom_kernels::ops::elementwise::{add, add_into};
use headroom_kernels::{Array, DeviceKind};
use headroom_nn::clip_grad_norm;
use serde::{Deserialize, Serialize};

use crate::data::HostBatch;
use crate::data_parallel::agreement::{Round, agree_on_update, whole_batch};
use crate::data_parallel::buckets::sum_in_buckets;
use crate::data_parallel::sharded_state;
use crate::error::{Error, Result};
use crate::planning::diagnosis::{Failure, diagnose};
use crate::step::context::Forward;
pub(crate) use crate::step::context::StepContext;
use crate::step::in_backward::step_in_backward;

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

/// How the batch is cut.
pub(crate) enum Sizes<'a> {
    /// By the adaptive micro-batcher, which also learns from the step.
    Adaptive(&'a mut MicroBatcher),
    /// Exactly these sizes, in order (they must add up to the batch); an out-of-memory fails.
    Fixed(&'a [usize]),
}

/// Runs step number `step` on `batch`.
///
/// In a data-parallel run (the context's world has several ranks) `batch` is this rank's
/// shard of the batch ([`Loader::sharded`](crate::data::Loader::sharded)): the ranks first sum
/// their shards' samples and scored targets, and each micro-batch is weighted by its share of
/// the whole batch's, so that the sum of the ranks' gradients is the one-process gradient.
/// After each round of micro-batches the ranks agree on what happened ([`Round`]) before
/// anything else is posted: an error anywhere stops every rank; an out-of-memory anywhere makes
/// every rank halve its micro-batch size, and the rank that ran out redoes the samples it had
/// not done, keeping what every rank accumulated. Once no rank has samples left, the gradients
/// and the loss are summed over the ranks and every rank makes the same update; where the
/// optimizer's state is sharded, each rank updates the parameters whose state it keeps and
/// broadcasts them to the others. The update inside the backward pass is a
/// one-process technique: a data-parallel step accumulates and updates after.
pub(crate) fn train_step(
    ctx: &mut StepContext<'_>,
    batch: &HostBatch,
    step: u64,
    mut sizes: Sizes<'_>,
) -> Result<StepReport> {
    let launch = ctx.launch();
    if let Sizes::Fixed(fixed) = &sizes
        && (fixed.iter().sum::<usize>() != batch.len() || fixed.contains(&0))
    {
        return Err(Error::config(format!(
            "micro-batch sizes {fixed:?} do not cut a batch of {}",
            batch.len()
        )));
    }
    let (samples, scored) = whole_batch(ctx, batch)?;
    let shard = batch;
    let mut total = Gradients::default();
    let (mut loss, mut done, mut micro_sizes, mut ooms) = (0.0, 0, Vec::new(), Vec::new());
    let mut indices = Vec::with_capacity(shard.len());
    let mut saved = (0, SavedReport::default());
    // The gradients' norm, once the whole batch was updated in its backward pass.
    let mut updated_in_backward = None;
    let mut peer_ooms = 0;
    // Where the dropout masks stood when the step began, for a step that starts over.
    let first_dropout_call = ctx.model.dropout_counter().map(|c| c.get());
    loop {
        let left = shard.len() - done;
        let mut attempt = None;
        // Whether the attempt added into the step's gradients.
        let mut added = false;
        if left > 0 {
            let size = match &sizes {
                Sizes::Adaptive(micro) => micro.size(),
                Sizes::Fixed(fixed) => fixed[micro_sizes.len()],
            }
            .min(left);
            let slice = shard.slice(done, done + size);
            let weight = slice.scored() as f64 / scored.max(1) as f64;
            // A failed attempt must not advance the dropout masks, so that the retry draws what
            // a run cut this way from the start would.
            let dropout_calls = ctx.model.dropout_counter().map(|c| c.get());
            let outcome = if ctx.in_backward && !launch.is_distributed() && size == batch.len() {
                step_in_backward(ctx, &slice, step).map(|updated| {
                    updated_in_backward = Some(updated.grad_norm);
                    saved = (size, updated.saved);
                    updated.loss
                })
            } else {
                micro_batch(ctx, &slice, weight, &mut total, &mut added).map(|(value, account)| {
                    if size > saved.0 {
                        saved = (size, account);
                    }
                    value
                })
            };
            attempt = Some((size, slice, dropout_calls, outcome));
        }
        let round = Round::agree(ctx, launch, left, attempt.as_ref())?;
        let Some((size, slice, dropout_calls, outcome)) = attempt else {
            // This rank had nothing left; it follows the others' round.
            match round {
                Round::Done => break,
                Round::Fine => continue,
                Round::Failed { rank } => {
                    return Err(Error::PeerFailed {
                        step: step + 1,
                        rank,
                        what: "an error",
                    });
                }
                Round::OutOfMemory { rank, size } => {
                    peer_ooms += 1;
                    shrink_for_peer(&mut sizes, step, rank, size)?;
                    continue;
                }
            }
        };
        let outcome = match (outcome, round) {
            (Err(err), _) if !err.is_out_of_memory() => return Err(err),
            (_, Round::Failed { rank }) => {
                return Err(Error::PeerFailed {
                    step: step + 1,
                    rank,
                    what: "an error",
                });
            }
            (outcome, _) => outcome,
        };
        match outcome {
            Ok(value) => {
                loss += value;
                done += size;
                micro_sizes.push(size);
                indices.extend(&slice.indices);
                match round {
                    Round::Done => break,
                    Round::OutOfMemory { rank, size } => {
                        peer_ooms += 1;
                        shrink_for_peer(&mut sizes, step, rank, size)?;
                    }
                    Round::Fine | Round::Failed { .. } => {}
                }
            }
            Err(err) => {
                let Some(report) = err.oom_report().cloned().map(Box::new) else {
                    return Err(err);
                };
                let dropout_calls = if added {
                    // The failed micro-batch summed into the step's gradients: start over.
                    total = Gradients::default();
                    (loss, done, saved) = (0.0, 0, (0, SavedReport::default()));
                    micro_sizes.clear();
                    indices.clear();
                    first_dropout_call
                } else {
                    dropout_calls
                };
                if let (Some(counter), Some(calls)) = (ctx.model.dropout_counter(), dropout_calls) {
                    counter.set(calls);
                }
                let Sizes::Adaptive(micro) = &mut sizes else {
                    return Err(err);
                };
                if !micro.shrink(step, size) {
                    let diagnosis = diagnose(
                        ctx.model,
                        &*ctx.optimizer,
                        &report,
                        Failure::OneSample,
                        None,
                    );
                    return Err(Error::DoesNotFit { diagnosis, report });
                }
                tracing::warn!(
                    "step {}: {} in a micro-batch of {size}; retrying in micro-batches of {}",
                    step + 1,
                    describe(&report),
                    micro.size()
                );
                ooms.push(Oom {
                    micro: size,
                    phase: Phase::MicroBatch,
                    report,
                });
            }
        }
    }
    if launch.is_distributed() || ctx.ranks > 1 {
        loss = sum_over_ranks(ctx, &mut total, (loss, step, shard.len()), &mut ooms)?;
    }
    let updated = match updated_in_backward {
        Some(norm) => Ok((true, norm)),
        None => update_absorbing_oom(ctx, &total, samples, step, &sizes, &mut ooms),
    };
    drop(total);
    let (finite, grad_norm) = agree_on_update(ctx, launch, step, updated)?;
    // Every rank saw the same summed gradients, so all updated or none did.
    if let Some(world) = ctx.world.as_deref_mut()
        && finite
        && sharded_state::is_sharded(&*ctx.optimizer)
    {
        sharded_state::broadcast_from_owners(world, ctx.model, &*ctx.optimizer)?;
    }
    let scale_change = ctx.scaler.update(finite);
    Ok(StepReport {
        loss,
        samples,
        scored,
        micro_sizes,
        indices,
        ooms,
        peer_ooms,
        skipped: !finite,
        grad_norm,
        scale_change,
        saved: saved.1,
    })
}

/// Halves this rank's micro-batch size after rank `rank` ran out of memory in a micro-batch of
/// `size`, as that rank did: the ranks keep one size.
fn shrink_for_peer(sizes: &mut Sizes<'_>, step: u64, rank: usize, size: usize) -> Result<()> {
    let shrunk = match sizes {
        Sizes::Adaptive(micro) => micro.shrink(step, size),
        Sizes::Fixed(_) => false,
    };
    if shrunk {
        tracing::warn!(
            "step {}: rank {rank} ran out of memory in a micro-batch of {size}; every rank goes \
             on in smaller micro-batches",
            step + 1
        );
        Ok(())
    } else {
        Err(Error::PeerFailed {
            step: step + 1,
            rank,
            what: "an out-of-memory it could not absorb",
        })
    }
}

/// Sums the gradients over the ranks in buckets (`data_parallel/buckets.rs`; zeros where this rank's
/// shard gave none), and `loss`; returns the summed loss. A planner's step for one rank, with no
/// world, forms the buckets alone.
fn sum_over_ranks(
    ctx: &mut StepContext<'_>,
    total: &mut Gradients,
    (loss, step, samples): (f64, u64, usize),
    ooms: &mut Vec<Oom>,
) -> Result<f64> {
    let params = ctx.model.module().parameters();
    for report in sum_in_buckets(ctx, &params, total, step)? {
        tracing::warn!(
            "step {}: {} forming a bucket of gradients; summing it in place",
            step + 1,
            describe(&report)
        );
        ooms.push(Oom {
            micro: samples,
            phase: Phase::Gradients,
            report: Box::new(report),
        });
    }
    Ok(ctx.agree([loss, 0.0, 0.0, 0.0], ReduceOp::Sum)?[0])
}

/// [`update`], retried once after releasing cached memory when it runs out; a second
/// out-of-memory of an adaptive step is explained as the training state not fitting.
fn update_absorbing_oom(
    ctx: &mut StepContext<'_>,
    total: &Gradients,
    samples: usize,
    step: u64,
    sizes: &Sizes<'_>,
    ooms: &mut Vec<Oom>,
) -> Result<(bool, f64)> {
    Ok(match update(ctx, total) {
        Err(err) if err.is_out_of_memory() => {
            let Some(report) = err.oom_report().cloned().map(Box::new) else {
                return Err(err);
            };
            tracing::warn!(
                "step {}: {} in the optimizer update; releasing cached memory and retrying",
                step + 1,
                describe(&report)
            );
            ooms.push(Oom {
                micro: samples,
                phase: Phase::Optimizer,
                report,
            });
            ctx.device.allocator().release_cached();
            match update(ctx, total) {
                Err(err) if matches!(sizes, Sizes::Adaptive(_)) && err.is_out_of_memory() => {
                    let Some(report) = err.oom_report().cloned().map(Box::new) else {
                        return Err(err);
                    };
                    let diagnosis = diagnose(
                        ctx.model,
                        &*ctx.optimizer,
                        &report,
                        Failure::TrainingState,
                        None,
                    );
                    return Err(Error::DoesNotFit { diagnosis, report });
                }
                other => other?,
            }
        }
        other => other?,
    })
}

/// The forward and backward pass of one micro-batch, with the loss scaled by `weight` (and the
/// loss scale), each parameter's gradient added into `total` as soon as it is complete: its
/// weighted loss, and what its forward pass saved. `added` turns true once anything was added
/// into `total`, which a failure after that leaves with part of the micro-batch's gradients.
fn micro_batch(
    ctx: &StepContext<'_>,
    slice: &HostBatch,
    weight: f64,
    total: &mut Gradients,
    added: &mut bool,
) -> Result<(f64, SavedReport)> {
    let params = ctx.model.module().parameters();
    let ids: Vec<_> = params.iter().map(|p| p.id()).collect();
    let Forward {
        tape,
        loss,
        saved,
        seed,
    } = ctx.forward(slice, weight)?;
    tape.gradient_each(&loss, seed, &ids, |index, grad| {
        *added = true;
        add_gradient(total, &params[index], grad)
    })?;
    let value = match ctx.device.kind() {
        DeviceKind::Meta => 0.0,
        _ => loss.to_f64()?[0] * weight,
    };
    Ok((value, saved))
}

/// Adds `grad`, the gradient of `param`, into `total`: taken as it is when `total` has none,
/// summed in place into the one there otherwise (into a new array when another handle shares
/// that one, which an in-place sum would change), as [`Gradients::accumulate`] sums.
fn add_gradient(
    total: &mut Gradients,
    param: &headroom_autograd::Tensor,
    grad: Array,
) -> Result<()> {
    let sum = match total.remove(param) {
        None => grad,
        Some(mine) if mine.is_shared() => add(&mine, &grad)?,
        Some(mut mine) => {
            add_into(&mut mine, &grad)?;
            mine
        }
    };
    Ok(total.insert(param, sum)?)
}

/// Unscales, measures and clips the gradients, and updates the weights unless they overflowed.
/// Returns whether they were finite, and their norm.
fn update(ctx: &mut StepContext<'_>, grads: &Gradients) -> Result<(bool, f64)> {
    let unscale = 1.0 / ctx.scaler.scale;
    let max_norm = if ctx.clip > 0.0 {
        ctx.clip
    } else {
        f64::INFINITY
    };
    let norm = clip_grad_norm(ctx.model.module(), grads, unscale, max_norm)?;
    if !norm.is_finite() {
        return Ok((false, norm.norm));
    }
    ctx.optimizer
        .step(ctx.model.module_mut(), grads, unscale * norm.factor)?;
    Ok((true, norm.norm))
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

#[cfg(test)]
mod accumulation_tests;
