//! The planner: the largest micro-batch size whose step, probed on the meta device, peaks
//! within the limit less a safety margin, found by bisection; under `memory.policy = "auto"`,
//! for each combination of memory techniques that [`super::policy`] proposes, the fastest
//! predicted of those that fit chosen.
//!
//! The margin leaves room for what the allocator does not see (a GPU's context, another
//! process). When the default margin is all that stands between the limit and one sample's
//! step, the planner halves it (down to none) until that step fits, and says so; a margin the
//! user set is never shrunk, and the error then names it as what does not fit. When no
//! candidate of the policy fits, the error also says what kept the optimizer step in the
//! backward pass out and what would fit without it (`search/kept_out.rs`).

use headroom_alloc::format_bytes;
use headroom_kernels::{Device, DeviceConfig, PlanTarget};
use headroom_nn::StateShard;

use std::sync::Arc;

use crate::config::PolicyKind;
use crate::config::{DEFAULT_MARGIN, TrainConfig};
use crate::data::Task;
use crate::error::{Error, Result};
use crate::model::{BuiltinModel, Knobs, ModelFactory, ModelSettings};
use crate::planning::budget::{Budget, UNLIMITED};
use crate::planning::diagnosis::Failure;
use crate::planning::head_chunk;
use crate::planning::plan::{ChunkProbe, Plan, Probe};
use crate::planning::policy::{self, Candidate, Policy, PolicyPlan};
use crate::planning::probe::{FirstSamples, Probed, Prober};
use crate::planning::rates::PlanRates;
use crate::planning::tag_bytes::TagBytes;

mod kept_out;

/// What every probe of one plan shares: the task, the budget, the device planned for, and the
/// rates its steps are priced at (resolved once).
struct Ground<'a> {
    task: &'a Task,
    factory: &'a Arc<dyn ModelFactory>,
    /// What the factory's model offers the policy.
    knobs: Knobs,
    budget: &'a Budget,
    target: PlanTarget,
    rates: PlanRates,
    /// The task's first samples, gathered once for every probe.
    samples: FirstSamples,
}

impl Ground<'_> {
    /// Probes of `config` on this ground.
    fn prober(&self, config: &TrainConfig) -> Prober {
        let factory = Arc::clone(self.factory);
        Prober::new(
            config,
            self.task,
            factory,
            *self.budget,
            self.target,
            self.rates,
        )
        .sharing(&self.samples)
    }
}

/// Finds the largest micro-batch size whose step fits `budget` with the configured margin, on
/// meta devices that allocate as `plan_target` does (a device's
/// [`Device::plan_target`](headroom_kernels::Device::plan_target)), for the memory techniques
/// the policy chooses ([`super::policy`]); then, for a GPT whose configuration leaves it unset,
/// the fused head's chunk ([`super::head_chunk`]'s rule).
pub fn plan(
    config: &TrainConfig,
    task: &Task,
    budget: &Budget,
    plan_target: PlanTarget,
) -> Result<Plan> {
    let factory: Arc<dyn ModelFactory> = Arc::new(BuiltinModel(config.model.clone()));
    plan_with(config, task, &factory, budget, plan_target)
}

/// The rank of `ranks` that keeps the largest share of the optimizer state where `config`
/// shards it (rank 0 where it does not): the rank whose plan is the tightest.
pub fn fullest_rank(config: &TrainConfig, task: &Task, ranks: usize) -> Result<usize> {
    if !config.optimizer.shard_state || ranks < 2 {
        return Ok(0);
    }
    let device = Device::meta(DeviceConfig::new(UNLIMITED))?;
    let model = BuiltinModel(config.model.clone()).build(
        &device,
        &task.train.shape(),
        &ModelSettings::of(config),
    )?;
    let shard = StateShard::balanced(model.module(), 0, ranks)?;
    Ok(shard.fullest(model.module()))
}

/// [`plan`] for the models `factory` builds, with the memory techniques they offer.
pub fn plan_with(
    config: &TrainConfig,
    task: &Task,
    factory: &Arc<dyn ModelFactory>,
    budget: &Budget,
    plan_target: PlanTarget,
) -> Result<Plan> {
    let shape = task.train.shape();
    let knobs = factory.knobs(&shape);
    let chunking = match (knobs.fused_head, config.model.head_chunk, shape.as_tokens()) {
        (Some(vocab), None, Some(tokens)) => Some((vocab, tokens.len)),
        _ => None,
    };
    let ground = Ground {
        task,
        factory,
        knobs,
        budget,
        target: plan_target,
        rates: crate::planning::rates::rates(config.memory.rates, plan_target)?,
        samples: FirstSamples::default(),
    };
    let mut config = config.clone();
    if let Some((vocab, _)) = chunking {
        config.model.head_chunk = Some(head_chunk::smallest(vocab));
    }
    let mut plan = match config.memory.policy {
        PolicyKind::Manual => plan_micro_batch(&config, &ground)?,
        PolicyKind::Auto => {
            let (policy, plan) = choose_policy(&config, &ground)?;
            policy.chosen.apply(&mut config);
            Plan {
                policy: Some(policy),
                ..plan
            }
        }
    };
    if knobs.fused_head.is_some() {
        plan.head_chunk = config.model.head_chunk;
    }
    if let Some((vocab, len)) = chunking {
        let rows = len * plan.micro;
        for rows in head_chunk::larger(vocab, rows, head_chunk::most_logits(plan_target)) {
            config.model.head_chunk = Some(rows);
            if !try_chunk(&mut plan, &config, &ground)? {
                break;
            }
        }
    }
    Ok(plan)
}

/// Plans every candidate of `config`'s memory policy, tier by tier of the optimizer state's
/// precision, until a tier has one that fits: the fastest of it is chosen, with its plan.
fn choose_policy(config: &TrainConfig, ground: &Ground<'_>) -> Result<(PolicyPlan, Plan)> {
    let mut candidates = Vec::new();
    let mut plans = Vec::new();
    // Why the last candidate planned did not fit, when its planning said.
    let mut last_failure = None;
    let tiers = policy::tiers(config, ground.knobs);
    let widest = tiers.first().and_then(|t| t.first()).map(|p| p.state);
    let pinned_offload = Policy::manual(config).offloads();
    for policies in tiers {
        let first = candidates.len();
        for policy in policies {
            let mut candidate = config.clone();
            policy.apply(&mut candidate);
            let planned = if policy.in_backward {
                plan_whole_batch(&candidate, ground)
            } else if one_sample_exceeds(&candidate, ground)? {
                Ok(None)
            } else {
                plan_micro_batch(&candidate, ground).map(Some)
            };
            let planned = match planned {
                Ok(planned) => {
                    last_failure = None;
                    planned
                }
                Err(err @ (Error::DoesNotFit { .. } | Error::Config { .. })) => {
                    last_failure = Some(err);
                    None
                }
                Err(err) => return Err(err),
            };
            candidates.push(Candidate {
                policy,
                micro: planned.as_ref().map(|p| p.micro),
                predicted_peak: planned.as_ref().map(|p| p.predicted_peak),
                predicted_seconds: planned.as_ref().map(|p| p.predicted_seconds),
                predicted_host_peak: planned.as_ref().and_then(|p| p.predicted_host_peak),
            });
            plans.push(planned);
        }
        // The fastest that fits, with its plan (a candidate fits exactly when it has one).
        let fastest = policy::fastest(&candidates[first..])
            .and_then(|at| plans[first + at].take().map(|plan| (first + at, plan)));
        let Some((best, plan)) = fastest else {
            continue;
        };
        let chosen = candidates[best].policy;
        let fitting = candidates[first..]
            .iter()
            .filter(|c| c.micro.is_some())
            .count();
        let narrowed = Some(chosen.state) != widest;
        let mut reason = fastest_of(fitting);
        if chosen.offloads() && !pinned_offload {
            reason = format!(
                "nothing without the host tier fits; offloading changes nothing of the \
                 optimization, for copies between the tiers; {reason}"
            );
        }
        if narrowed {
            reason = format!(
                "no candidate with a wider optimizer state fits one sample; {} state \
                 changes the optimization slightly; {reason}",
                chosen.state
            );
            tracing::warn!(
                "the memory policy keeps the optimizer state in {}: {reason}",
                chosen.state
            );
        }
        return Ok((
            PolicyPlan {
                candidates,
                chosen,
                reason,
            },
            plan,
        ));
    }
    // Nothing fits: the lightest candidate's own planning says why (what the training state
    // needs, and the cures), as a plan without the policy would; then what kept the update in
    // the backward pass out, and what fits without it.
    let Some(policy) = candidates.last().map(|c| c.policy) else {
        return Err(Error::config("memory.policy: no candidate to plan"));
    };
    let mut lightest = config.clone();
    policy.apply(&mut lightest);
    let failure = match last_failure {
        Some(err) => Some(err),
        None => one_sample_does_not_fit(&lightest, ground)?,
    };
    let why = match failure {
        Some(err) => err,
        None => match plan_micro_batch(&lightest, ground) {
            Err(err) => err,
            Ok(_) => Error::config(format!(
                "memory.policy: {} fits one sample alone but not a step of the batch",
                policy.describe()
            )),
        },
    };
    Err(match kept_out::kept_out(config, ground)? {
        Some(note) => with_note(why, &note),
        None => why,
    })
}

/// The error of a step of one sample alone that runs out of memory, explained; none when that
/// step fits the limit (one probe of one micro-batch, where [`plan_micro_batch`]'s bisection
/// would run the whole batch in micro-batches of one to learn the same).
fn one_sample_does_not_fit(config: &TrainConfig, ground: &Ground<'_>) -> Result<Option<Error>> {
    let mut alone = config.clone();
    alone.batch.size = 1;
    let mut prober = ground.prober(&alone);
    let Probed::OutOfMemory(report) = prober.probe(1)?.clone() else {
        return Ok(None);
    };
    let diagnosis = prober.explain(&report, Failure::OneSample)?;
    Ok(Some(Error::DoesNotFit { diagnosis, report }))
}

/// `err` (nothing fits) with `note` added to what it tells the user.
fn with_note(err: Error, note: &str) -> Error {
    match err {
        Error::DoesNotFit { diagnosis, report } => Error::DoesNotFit {
            diagnosis: format!("{diagnosis}\nnote: {note}"),
            report,
        },
        Error::Config { mut problems } => {
            problems.push(format!("note: {note}"));
            Error::Config { problems }
        }
        other => other,
    }
}

/// True when a step of one sample alone, which peaks no higher than any step in micro-batches
/// of one, exceeds the whole limit: the candidate cannot fit, known from one probe of one
/// micro-batch instead of a bisection whose smallest probes run the whole batch.
/// Why the chosen candidate won: the fastest predicted step of those that fit.
fn fastest_of(fitting: usize) -> String {
    match fitting {
        1 => "the only candidate that fits".into(),
        n => format!("the fastest predicted step of the {n} that fit"),
    }
}

fn one_sample_exceeds(config: &TrainConfig, ground: &Ground<'_>) -> Result<bool> {
    let mut alone = config.clone();
    alone.batch.size = 1;
    let mut prober = ground.prober(&alone);
    Ok(!prober.fits(1, ground.budget.limit)?)
}

/// The plan of a step in one micro-batch of the whole batch, if it fits with the margin (the
/// optimizer step in the backward pass saves memory in no other).
fn plan_whole_batch(config: &TrainConfig, ground: &Ground<'_>) -> Result<Option<Plan>> {
    let mut prober = ground.prober(config);
    let margin = config.batch.margin.unwrap_or(DEFAULT_MARGIN);
    let whole = config.batch.size.min(ground.task.train.len()).max(1);
    Ok(prober
        .fits(whole, ground.budget.step_limit(margin))?
        .then(|| answer(&prober, whole, ground.budget, margin, false)))
}

/// Probes the plan's micro-batch with `config`'s head chunk; when it fits, the chunk, its peak
/// and its breakdowns become the plan's. Returns whether it fit.
fn try_chunk(plan: &mut Plan, config: &TrainConfig, ground: &Ground<'_>) -> Result<bool> {
    let mut prober = ground.prober(config);
    let peak = match prober.probe(plan.micro)? {
        Probed::Peak(peak) => Some(*peak),
        Probed::OutOfMemory(_) => None,
    };
    let fits = peak.is_some_and(|p| p <= plan.step_limit);
    let rows = config.model.head_chunk.unwrap_or(0);
    plan.chunk_probes.push(ChunkProbe { rows, peak, fits });
    if let (true, Some(peak), Some(breakdown)) = (fits, peak, prober.breakdown(plan.micro)) {
        plan.head_chunk = Some(rows);
        plan.predicted_peak = peak;
        plan.predicted_seconds = breakdown.seconds;
        plan.predicted_host_peak = breakdown.host_peak;
        plan.peak_by_tag = largest_first(breakdown.tags.clone());
        plan.saved_by_op = breakdown.saved.clone();
    }
    Ok(fits)
}

/// The micro-batch part of [`plan`], with `config`'s head chunk.
fn plan_micro_batch(config: &TrainConfig, ground: &Ground<'_>) -> Result<Plan> {
    let budget = ground.budget;
    let mut prober = ground.prober(config);
    let margin = config.batch.margin.unwrap_or(DEFAULT_MARGIN);
    let max = config.batch.size.min(ground.task.train.len()).max(1);
    let micro = largest_fitting(&mut prober, max, budget.step_limit(margin))?;
    if micro > 0 {
        return Ok(answer(&prober, micro, budget, margin, false));
    }
    // Nothing fits: the bisection ended on one sample, whose outcome says why.
    let one = match prober.probe(1)?.clone() {
        Probed::OutOfMemory(report) => {
            let diagnosis = prober.explain(&report, Failure::OneSample)?;
            return Err(Error::DoesNotFit { diagnosis, report });
        }
        Probed::Peak(peak) => peak,
    };
    if config.batch.margin.is_some() {
        return Err(Error::config(format!(
            "batch.margin: one sample's step peaks at {}, within the {} limit but above the {} \
             that a margin of {margin} leaves; lower batch.margin, or leave it unset for the \
             planner to shrink it",
            format_bytes(one),
            format_bytes(budget.limit),
            format_bytes(budget.step_limit(margin))
        )));
    }
    let shrunk = std::iter::successors(Some(margin / 2.0), |m| Some(m / 2.0))
        .take(3)
        .chain([0.0])
        .find(|&m| budget.step_limit(m) >= one)
        .unwrap_or(0.0);
    tracing::warn!(
        "one sample's step peaks at {}, above the {} that the default margin of {margin} leaves \
         under the {} limit; planning with a margin of {shrunk} instead (batch.margin sets it)",
        format_bytes(one),
        format_bytes(budget.step_limit(margin)),
        format_bytes(budget.limit)
    );
    let micro = largest_fitting(&mut prober, max, budget.step_limit(shrunk))?.max(1);
    Ok(answer(&prober, micro, budget, shrunk, true))
}

/// The largest size in `1..=max` whose step fits `step_limit`, by bisection (0 if none does,
/// known from the size of one before any bisection).
fn largest_fitting(prober: &mut Prober, max: usize, step_limit: u64) -> Result<usize> {
    if prober.fits(max, step_limit)? {
        return Ok(max);
    }
    if !prober.fits(1, step_limit)? {
        return Ok(0);
    }
    let (mut fits, mut fails) = (1, max);
    while fails - fits > 1 {
        let mid = (fits + fails) / 2;
        if prober.fits(mid, step_limit)? {
            fits = mid;
        } else {
            fails = mid;
        }
    }
    Ok(fits)
}

/// The plan of `micro` under `budget` with `margin`, its probes read from `prober`.
fn answer(
    prober: &Prober,
    micro: usize,
    budget: &Budget,
    margin: f64,
    margin_shrunk: bool,
) -> Plan {
    let step_limit = budget.step_limit(margin);
    let probes: Vec<Probe> = prober
        .seen()
        .iter()
        .map(|(size, outcome)| {
            let peak = match outcome {
                Probed::Peak(peak) => Some(*peak),
                Probed::OutOfMemory(_) => None,
            };
            Probe {
                micro: *size,
                peak,
                fits: peak.is_some_and(|p| p <= step_limit),
            }
        })
        .collect();
    let predicted_peak = probes
        .iter()
        .find(|p| p.micro == micro)
        .and_then(|p| p.peak)
        .unwrap_or(0);
    let breakdown = prober.breakdown(micro).cloned().unwrap_or_default();
    Plan {
        probes,
        micro,
        predicted_peak,
        predicted_host_peak: breakdown.host_peak,
        step_limit,
        margin,
        margin_shrunk,
        predicted_seconds: breakdown.seconds,
        peak_by_tag: largest_first(breakdown.tags),
        saved_by_op: breakdown.saved,
        head_chunk: None,
        chunk_probes: Vec::new(),
        policy: None,
    }
}

/// `tags` with the largest peak first.
fn largest_first(mut tags: Vec<TagBytes>) -> Vec<TagBytes> {
    tags.sort_by_key(|t| std::cmp::Reverse(t.peak));
    tags
}
