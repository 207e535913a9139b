//! [`train_step`]: one step over a batch in micro-batches, as the contract in the step's module
//! doc states it.

use headroom_alloc::OomReport;
use headroom_autograd::{Gradients, SavedReport};
use headroom_collectives::ReduceOp;
use headroom_kernels::ops::elementwise::{add, add_into};
use headroom_kernels::{Array, DeviceKind};
use headroom_nn::{GradNorm, clip_grad_norm};

use crate::data::HostBatch;
use crate::data_parallel::agreement::{Round, agree_on_update, whole_batch};
use crate::data_parallel::buckets::sum_in_buckets;
use crate::data_parallel::sharded_state;
use crate::data_parallel::world::Launch;
use crate::error::{Error, Result};
use crate::step::context::Forward;
use crate::step::context::StepContext;
use crate::step::diagnosis::{Failure, diagnose, with_run_suggestion};
use crate::step::in_backward::step_in_backward;
use crate::step::micro::MicroBatcher;
use crate::step::report::{Oom, Phase, StepReport, describe};

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
    sizes: Sizes<'_>,
) -> Result<StepReport> {
    let launch = ctx.peers.launch();
    sizes.check_cut(batch)?;
    let (samples, scored) = whole_batch(&mut ctx.peers, batch)?;
    let mut progress = Progress::new(ctx, batch, step, scored, sizes);
    progress.micro_batches(ctx, launch)?;
    if launch.is_distributed() || ctx.ranks > 1 {
        progress.sum_over_ranks(ctx)?;
    }
    let updated = progress.update_absorbing_oom(ctx, samples);
    let (finite, grad_norm) = agree_on_update(&mut ctx.peers, launch, step, updated)?;
    // Every rank saw the same summed gradients, so all updated or none did.
    if let Some(world) = ctx.peers.world.as_deref_mut()
        && finite
        && sharded_state::is_sharded(&*ctx.optimizer)
    {
        sharded_state::broadcast_from_owners(world, ctx.model, &*ctx.optimizer)?;
    }
    let scale_change = ctx.scaler.update(finite);
    Ok(StepReport {
        loss: progress.loss,
        samples,
        scored,
        micro_sizes: progress.micro_sizes,
        indices: progress.indices,
        ooms: progress.ooms,
        peer_ooms: progress.peer_ooms,
        skipped: !finite,
        grad_norm,
        scale_change,
        saved: progress.saved.1,
    })
}

impl Sizes<'_> {
    /// Checks that fixed sizes cut `batch`: they add up to it, and none is 0.
    fn check_cut(&self, batch: &HostBatch) -> Result<()> {
        match self {
            Sizes::Fixed(fixed)
                if fixed.iter().sum::<usize>() != batch.len() || fixed.contains(&0) =>
            {
                Err(Error::config(format!(
                    "micro-batch sizes {fixed:?} do not cut a batch of {}",
                    batch.len()
                )))
            }
            _ => Ok(()),
        }
    }
}

/// One micro-batch tried: its size, its samples, where the dropout masks stood before it (to
/// rewind them if it fails), and how it went.
type Attempt = (usize, HostBatch, Option<u64>, Result<Completed>);

/// What a micro-batch that completed gives the step.
struct Completed {
    /// Its weighted loss.
    loss: f64,
    /// What its forward pass saved for its backward pass.
    saved: SavedReport,
    /// The gradients' norm, when it was the whole batch and updated it in its backward pass.
    updated_norm: Option<f64>,
}

/// Where a step stands between its micro-batches: what they did, and what they accumulated.
struct Progress<'a> {
    /// This rank's shard of the batch.
    shard: &'a HostBatch,
    /// The step's number.
    step: u64,
    /// The whole batch's scored targets, which weigh each micro-batch.
    scored: usize,
    /// How the batch is cut.
    sizes: Sizes<'a>,
    /// The weighted loss of the micro-batches done.
    loss: f64,
    /// The samples of the shard done: the next micro-batch starts there.
    done: usize,
    /// The sizes of the micro-batches done, in order.
    micro_sizes: Vec<usize>,
    /// The dataset indices of the samples done, in the order their micro-batches completed.
    indices: Vec<usize>,
    /// The size of the largest micro-batch done, and what its forward pass saved.
    saved: (usize, SavedReport),
    /// The out-of-memory failures absorbed.
    ooms: Vec<Oom>,
    /// The out-of-memory failures of other ranks this rank shrank its micro-batches for.
    peer_ooms: usize,
    /// The step's accumulated gradients: those of the micro-batches done, and of the one
    /// running.
    total: Gradients,
    /// Whether the latest attempt added into `total` (a sum in place, which cannot be taken
    /// back).
    added: bool,
    /// The gradients' norm, once the whole batch was updated in its backward pass.
    updated_in_backward: Option<f64>,
    /// Where the dropout masks stood when the step began, for a step that starts over.
    first_dropout_call: Option<u64>,
}

impl<'a> Progress<'a> {
    /// A step on `shard` that has done nothing yet.
    fn new(
        ctx: &StepContext<'_>,
        shard: &'a HostBatch,
        step: u64,
        scored: usize,
        sizes: Sizes<'a>,
    ) -> Self {
        Self {
            shard,
            step,
            scored,
            sizes,
            loss: 0.0,
            done: 0,
            micro_sizes: Vec::new(),
            indices: Vec::with_capacity(shard.len()),
            saved: (0, SavedReport::default()),
            ooms: Vec::new(),
            peer_ooms: 0,
            total: Gradients::default(),
            added: false,
            updated_in_backward: None,
            first_dropout_call: ctx.model.dropout_counter().map(|c| c.get()),
        }
    }

    /// Rounds of micro-batches until no rank has samples left: in each, this rank tries its
    /// next micro-batch (if it has samples left), the ranks agree on what happened, and this
    /// rank settles its attempt, or follows the others' round.
    fn micro_batches(&mut self, ctx: &mut StepContext<'_>, launch: Launch) -> Result<()> {
        loop {
            let left = self.shard.len() - self.done;
            let attempt = (left > 0).then(|| self.attempt(ctx, launch, left));
            let stop = ctx.model.param_shards().and_then(|s| s.world().take_stop());
            let finished = match (attempt, stop) {
                // Another rank's round stopped this rank's pass at a collective.
                (Some((.., Err(err))), Some(stop)) => match Round::of(stop) {
                    Round::Fine | Round::Done => return Err(err),
                    round => self.follow(ctx, round)?,
                },
                (attempt, _) => {
                    let round = Round::agree(&mut ctx.peers, launch, left, attempt.as_ref())?;
                    match attempt {
                        // This rank had nothing left; it follows the others' round.
                        None => self.follow(ctx, round)?,
                        Some(attempt) => self.settle(ctx, attempt, round)?,
                    }
                }
            };
            if finished {
                return Ok(());
            }
        }
    }

    /// Runs the next micro-batch, of at most `left` samples: the whole batch updated in its
    /// backward pass when the step may and the micro-batch is the batch, else its gradients
    /// accumulated into the step's.
    fn attempt(&mut self, ctx: &mut StepContext<'_>, launch: Launch, left: usize) -> Attempt {
        let size = match &self.sizes {
            Sizes::Adaptive(micro) => micro.size(),
            Sizes::Fixed(fixed) => fixed[self.micro_sizes.len()],
        }
        .min(left);
        let slice = self.shard.slice(self.done, self.done + size);
        let weight = slice.scored() as f64 / self.scored.max(1) as f64;
        // A failed attempt must not advance the dropout masks, so that the retry draws what
        // a run cut this way from the start would.
        let dropout_calls = ctx.model.dropout_counter().map(|c| c.get());
        self.added = false;
        let outcome = if ctx.in_backward && !launch.is_distributed() && size == self.shard.len() {
            step_in_backward(ctx, &slice, self.step).map(|updated| Completed {
                loss: updated.loss,
                saved: updated.saved,
                updated_norm: Some(updated.grad_norm),
            })
        } else {
            micro_batch(ctx, &slice, weight, &mut self.total, &mut self.added).map(
                |(loss, saved)| Completed {
                    loss,
                    saved,
                    updated_norm: None,
                },
            )
        };
        (size, slice, dropout_calls, outcome)
    }

    /// Settles this rank's `attempt` once the ranks agreed on `round`: an error that is not an
    /// out-of-memory, here or on another rank, fails the step; a success is recorded (and the
    /// round followed), an out-of-memory recovered from. Returns whether the micro-batches are
    /// finished.
    fn settle(
        &mut self,
        ctx: &mut StepContext<'_>,
        (size, slice, dropout_calls, outcome): Attempt,
        round: Round,
    ) -> Result<bool> {
        match (outcome, round) {
            (Err(err), _) if !err.is_out_of_memory() => Err(err),
            (_, Round::Failed { rank }) => Err(peer_failed(self.step, rank)),
            (Ok(completed), round) => {
                self.record(size, &slice, completed);
                self.follow(ctx, round)
            }
            (Err(err), _) => {
                self.recover(ctx, err, size, dropout_calls)?;
                Ok(false)
            }
        }
    }

    /// Follows the round the ranks agreed on: finished when no rank has samples left, on after
    /// a round that went fine, in smaller micro-batches after another rank's out-of-memory
    /// (from the step's first sample where the parameters are sharded); another rank's error
    /// fails the step. Returns whether the micro-batches are finished.
    fn follow(&mut self, ctx: &StepContext<'_>, round: Round) -> Result<bool> {
        match round {
            Round::Done => Ok(true),
            Round::Fine => Ok(false),
            Round::Failed { rank } => Err(peer_failed(self.step, rank)),
            Round::OutOfMemory { rank, size } => {
                self.peer_ooms += 1;
                if ctx.model.param_shards().is_some() {
                    self.start_over(ctx);
                }
                shrink_for_peer(&mut self.sizes, self.step, rank, size)?;
                Ok(false)
            }
        }
    }

    /// Records a micro-batch of `size` that completed on `slice`.
    fn record(&mut self, size: usize, slice: &HostBatch, completed: Completed) {
        self.loss += completed.loss;
        self.done += size;
        self.micro_sizes.push(size);
        self.indices.extend(&slice.indices);
        match completed.updated_norm {
            Some(norm) => {
                self.updated_in_backward = Some(norm);
                self.saved = (size, completed.saved);
            }
            None if size > self.saved.0 => self.saved = (size, completed.saved),
            None => {}
        }
    }

    /// Recovers from `err`, an out-of-memory in a micro-batch of `size` that began with the
    /// dropout masks at `dropout_calls`: the masks rewound to there, or the step started over
    /// from its first sample if the micro-batch had added into the step's gradients or the
    /// parameters are sharded (every rank's gradients hold a part of the failed pass's); then
    /// the micro-batch size halved. A fixed cut, or a single sample that does not fit, fails.
    fn recover(
        &mut self,
        ctx: &StepContext<'_>,
        err: Error,
        size: usize,
        dropout_calls: Option<u64>,
    ) -> Result<()> {
        let Some(report) = err.oom_report().cloned().map(Box::new) else {
            return Err(err);
        };
        if self.added || ctx.model.param_shards().is_some() {
            // The failed micro-batch summed into the step's gradients: start over.
            self.start_over(ctx);
        } else if let (Some(counter), Some(calls)) = (ctx.model.dropout_counter(), dropout_calls) {
            counter.set(calls);
        }
        let Sizes::Adaptive(micro) = &mut self.sizes else {
            return Err(err);
        };
        if !micro.shrink(self.step, size) {
            return Err(does_not_fit(ctx, report, Failure::OneSample));
        }
        tracing::warn!(
            "step {}: {} in a micro-batch of {size}; retrying in micro-batches of {}",
            self.step + 1,
            describe(&report),
            micro.size()
        );
        self.ooms.push(Oom {
            micro: size,
            phase: Phase::MicroBatch,
            report,
        });
        Ok(())
    }

    /// Forgets every micro-batch done and what they accumulated (but the out-of-memory
    /// failures absorbed), and rewinds the dropout masks, for the step to start over from its
    /// first sample.
    fn start_over(&mut self, ctx: &StepContext<'_>) {
        if let (Some(counter), Some(calls)) = (ctx.model.dropout_counter(), self.first_dropout_call)
        {
            counter.set(calls);
        }
        self.total = Gradients::default();
        (self.loss, self.done, self.saved) = (0.0, 0, (0, SavedReport::default()));
        self.micro_sizes.clear();
        self.indices.clear();
    }

    /// Sums the gradients over the ranks in buckets (`data_parallel/buckets.rs`; zeros where this
    /// rank's shard gave none), and the loss. A planner's step for one rank, with no world,
    /// forms the buckets alone.
    fn sum_over_ranks(&mut self, ctx: &mut StepContext<'_>) -> Result<()> {
        // Sharded parameters' gradients were summed into each rank's chunk as they formed.
        let params = match ctx.model.param_shards() {
            Some(_) => Vec::new(),
            None => ctx.model.module().parameters(),
        };
        let grads = (&params[..], ctx.ranks);
        for report in sum_in_buckets(&mut ctx.peers, grads, &mut self.total, self.step)? {
            tracing::warn!(
                "step {}: {} forming a bucket of gradients; summing it in place",
                self.step + 1,
                describe(&report)
            );
            self.ooms.push(Oom {
                micro: self.shard.len(),
                phase: Phase::Gradients,
                report: Box::new(report),
            });
        }
        self.loss = ctx.peers.agree([self.loss, 0.0, 0.0, 0.0], ReduceOp::Sum)?[0];
        Ok(())
    }

    /// The update of the step's `samples`, unless the backward pass made it: [`update`],
    /// retried once after releasing cached memory when it runs out; a second out-of-memory of
    /// an adaptive step is explained as the training state not fitting. The step's gradients
    /// are freed after it. Returns whether the gradients were finite, and their norm.
    fn update_absorbing_oom(
        &mut self,
        ctx: &mut StepContext<'_>,
        samples: usize,
    ) -> Result<(bool, f64)> {
        let total = std::mem::take(&mut self.total);
        if let Some(norm) = self.updated_in_backward {
            return Ok((true, norm));
        }
        // Measured once: a retry must not agree on the sharded norm again, as the others
        // do not.
        let mut norm = None;
        Ok(match update(ctx, &total, &mut norm) {
            Err(err) if err.is_out_of_memory() => {
                let Some(report) = err.oom_report().cloned().map(Box::new) else {
                    return Err(err);
                };
                tracing::warn!(
                    "step {}: {} in the optimizer update; releasing cached memory and retrying",
                    self.step + 1,
                    describe(&report)
                );
                self.ooms.push(Oom {
                    micro: samples,
                    phase: Phase::Optimizer,
                    report,
                });
                ctx.device.allocator().release_cached();
                match update(ctx, &total, &mut norm) {
                    Err(err)
                        if matches!(self.sizes, Sizes::Adaptive(_)) && err.is_out_of_memory() =>
                    {
                        let Some(report) = err.oom_report().cloned().map(Box::new) else {
                            return Err(err);
                        };
                        return Err(does_not_fit(ctx, report, Failure::TrainingState));
                    }
                    other => other?,
                }
            }
            other => other?,
        })
    }
}

/// A step failed because rank `rank` failed with an error.
fn peer_failed(step: u64, rank: usize) -> Error {
    Error::PeerFailed {
        step: step + 1,
        rank,
        what: "an error",
    }
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

/// The run's error for `report`, an out-of-memory that `failure` describes: the diagnosis of
/// what holds the memory, with the run's suggestion.
fn does_not_fit(ctx: &StepContext<'_>, report: Box<OomReport>, failure: Failure) -> Error {
    let diagnosis = diagnose((&*ctx.model, &*ctx.optimizer), ctx.device, &report, failure);
    Error::DoesNotFit {
        diagnosis: with_run_suggestion(diagnosis),
        report,
    }
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
/// The norm is measured into `measured` unless an earlier try left it there. Returns whether
/// the gradients were finite, and their norm.
pub(super) fn update(
    ctx: &mut StepContext<'_>,
    grads: &Gradients,
    measured: &mut Option<GradNorm>,
) -> Result<(bool, f64)> {
    let unscale = 1.0 / ctx.scaler.scale;
    let norm = match *measured {
        Some(norm) => norm,
        None => *measured.insert(grad_norm(ctx, grads, unscale)?),
    };
    if !norm.is_finite() {
        return Ok((false, norm.norm));
    }
    // Gathered copies kept through the step (ZeRO stage 2) go before their chunks change.
    if let Some(shards) = ctx.model.param_shards() {
        shards.release_gathered();
    }
    ctx.optimizer
        .step(ctx.model.module_mut(), grads, unscale * norm.factor)?;
    Ok((true, norm.norm))
}

/// The norm of the `unscale`d gradients and the factor that clips them: summed over the ranks
/// where each holds its chunks' gradients.
fn grad_norm(ctx: &mut StepContext<'_>, grads: &Gradients, unscale: f64) -> Result<GradNorm> {
    let max_norm = if ctx.clip > 0.0 {
        ctx.clip
    } else {
        f64::INFINITY
    };
    Ok(match ctx.model.param_shards() {
        // Each rank holds its chunks' gradients: the squares are summed over the ranks.
        Some(_) => {
            let mine = clip_grad_norm(ctx.model.module(), grads, unscale, f64::INFINITY)?.norm;
            let squares = ctx
                .peers
                .agree([mine * mine, 0.0, 0.0, 0.0], ReduceOp::Sum)?;
            GradNorm::clipping(squares[0].sqrt(), max_norm)
        }
        None => clip_grad_norm(ctx.model.module(), grads, unscale, max_norm)?,
    })
}
