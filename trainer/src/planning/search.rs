//! The planner: the largest micro-batch size whose step, probed on the meta device, peaks
//! within the limit less a safety margin, found by a few guesses where the peak would meet the
//! limit ([`largest_fitting`]); under `memory.policy = "auto"`, for each combination of memory
//! techniques that [`super::policy`] proposes, the fastest predicted of those that fit chosen.
//!
//! The work is a meta pass a probe, and a plan's time grows with the candidates it weighs: a
//! candidate that does not fit one sample costs one probe, cut short where memory runs out;
//! one that fits, about five (the whole batch, a like candidate's answer or one sample, the
//! guesses, and the step time of the size chosen). The candidates of a tier are planned in
//! two chains side by side; a GPT's fused head is tried first with its largest chunk, which
//! settles the chunk in one probe wherever it fits.
//!
//! The margin leaves room for what the allocator does not see (a GPU's context, another
//! process). When the default margin is all that stands between the limit and one sample's
//! step, the planner halves it (down to none) until that step fits, and says so; a margin the
//! user set is never shrunk, and the error then names it as what does not fit. When no
//! candidate of the policy fits, the error also says what kept the optimizer step in the
//! backward pass out and what would fit without it (`search/kept_out.rs`).

use headroom_alloc::{OomReport, format_bytes};
use headroom_kernels::{Device, DeviceConfig, HOST_TIER, PlanTarget};
use headroom_nn::StateShard;

use std::sync::Arc;

use crate::config::PolicyKind;
use crate::config::{DEFAULT_MARGIN, TrainConfig};
use crate::data::Task;
use crate::error::{Error, Result};
use crate::model::{BuiltinModel, Knobs, ModelFactory, ModelSettings};
use crate::planning::budget::{Budget, UNLIMITED};
use crate::planning::head_chunk;
use crate::planning::plan::{ChunkProbe, Plan, Probe};
use crate::planning::policy::{self, Candidate, Policy, PolicyPlan};
use crate::planning::probe::{FirstSamples, Probed, Prober};
use crate::planning::rates::PlanRates;
use crate::planning::side_by_side::side_by_side;
use crate::planning::tag_bytes::TagBytes;
use crate::step::diagnosis::Failure;

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
    /// The vocabulary and sequence length of a fused head whose chunk the planner chooses.
    chunking: Option<(usize, usize)>,
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

    /// The whole batch of `config`'s task, in samples.
    fn whole_batch(&self, config: &TrainConfig) -> usize {
        config.batch.size.min(self.task.train.len()).max(1)
    }

    /// The head's chunks to try after the smallest for micro-batches of `micro` samples, in
    /// rows (see [`head_chunk::larger`]); none where the planner does not choose the chunk.
    fn larger_chunks(&self, micro: usize) -> Vec<usize> {
        self.chunking.map_or_else(Vec::new, |(vocab, len)| {
            head_chunk::larger(vocab, len * micro, head_chunk::most_logits(self.target))
        })
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
        rates: crate::planning::rates::rates(&config.memory, plan_target)?,
        samples: FirstSamples::default(),
        chunking,
    };
    let mut config = config.clone();
    if let Some((vocab, _)) = chunking {
        config.model.head_chunk = Some(head_chunk::smallest(vocab));
    }
    let mut plan = match config.memory.policy {
        PolicyKind::Manual => match whole_batch_at_largest_chunk(&config, &ground)? {
            Some(plan) => plan,
            None => plan_micro_batch(&config, &ground)?,
        },
        PolicyKind::Auto => {
            let (policy, plan) = choose_policy(&config, &ground)?;
            policy.chosen.apply(&mut config);
            Plan {
                policy: Some(policy),
                ..plan
            }
        }
    };
    if knobs.fused_head.is_some() && plan.head_chunk.is_none() {
        plan.head_chunk = config.model.head_chunk;
    }
    if plan.chunk_probes.is_empty() {
        choose_chunk(&mut plan, &config, &ground)?;
    }
    Ok(plan)
}

/// The plan of the whole batch in one micro-batch with the head's largest chunk, where it
/// fits with the margin: the chunk then takes nothing from the samples, and one probe settles
/// both (as the search from the smallest chunk and the chunk's doubling would, for peaks that
/// grow with the chunk).
fn whole_batch_at_largest_chunk(config: &TrainConfig, ground: &Ground<'_>) -> Result<Option<Plan>> {
    let whole = ground.whole_batch(config);
    let Some(&rows) = ground.larger_chunks(whole).last() else {
        return Ok(None);
    };
    let margin = config.batch.margin.unwrap_or(DEFAULT_MARGIN);
    let step = (whole, ground.budget.step_limit(margin));
    let (probed, prober) = probe_chunk(step, config, rows, ground)?;
    let Some(mut prober) = prober else {
        return Ok(None);
    };
    let mut plan = answer(&mut prober, whole, ground.budget, margin, false)?;
    plan.head_chunk = Some(rows);
    plan.chunk_probes.push(probed);
    Ok(Some(plan))
}

/// Gives `plan`, found with the smallest chunk, the largest chunk of the head that still fits
/// its micro-batch, with that chunk's peak, step time and breakdowns. The largest is probed
/// first (unless [`whole_batch_at_largest_chunk`] found it does not fit); where it does not
/// fit, the chunks double from the smallest, two at a time side by side, until one does not.
fn choose_chunk(plan: &mut Plan, config: &TrainConfig, ground: &Ground<'_>) -> Result<()> {
    let mut larger = ground.larger_chunks(plan.micro);
    let Some(largest) = larger.pop() else {
        return Ok(());
    };
    if plan.micro != ground.whole_batch(config) {
        let (probed, prober) = probe_chunk((plan.micro, plan.step_limit), config, largest, ground)?;
        plan.chunk_probes.push(probed);
        if let Some(prober) = prober {
            return take_chunk(plan, largest, prober);
        }
    }
    let mut fitting = None;
    'rounds: for round in larger.chunks(CHAINS) {
        let probes = side_by_side(
            round
                .iter()
                .map(|&rows| {
                    let step = (plan.micro, plan.step_limit);
                    move || probe_chunk(step, config, rows, ground)
                })
                .collect(),
        );
        for probe in probes {
            let (probed, prober) = probe?;
            plan.chunk_probes.push(probed);
            match prober {
                Some(prober) => fitting = Some((probed.rows, prober)),
                None => break 'rounds,
            }
        }
    }
    match fitting {
        Some((rows, prober)) => take_chunk(plan, rows, prober),
        None => Ok(()),
    }
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
        for (policy, planned) in policies.iter().zip(plan_tier(config, ground, &policies)?) {
            let policy = *policy;
            let planned = match planned {
                Ok(plan) => {
                    last_failure = None;
                    Some(plan)
                }
                Err(failed) => {
                    last_failure = failed;
                    None
                }
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
    // needs), as a plan without the policy would; then what kept the update in the backward
    // pass out, and what fits without it.
    let Some(policy) = candidates.last().map(|c| c.policy) else {
        return Err(Error::config("memory.policy: no candidate to plan"));
    };
    let mut lightest = config.clone();
    policy.apply(&mut lightest);
    let failure = match last_failure {
        Some(Failed::Error(err)) => Some(err),
        Some(Failed::Unexplained(unexplained)) => Some(unexplained.explain()?),
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
/// step fits the limit (one probe of one micro-batch, where [`plan_micro_batch`]'s search
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

/// What planning one candidate found: its plan, or why it does not fit where its planning
/// said.
type Planned = std::result::Result<Plan, Option<Failed>>;

/// The candidates of one tier planned in chains of every [`CHAINS`]th, each chain's search
/// starting from the micro-batch of its last candidate that fit, the chains side by side:
/// what each found, in the tier's order. The chains do not depend on the machine, so
/// neither do the probes of any candidate.
fn plan_tier(
    config: &TrainConfig,
    ground: &Ground<'_>,
    policies: &[Policy],
) -> Result<Vec<Planned>> {
    let chain = |from: usize| -> Result<Vec<(usize, Planned)>> {
        let mut hint = None;
        let mut planned = Vec::new();
        for at in (from..policies.len()).step_by(CHAINS) {
            let policy = policies[at];
            let outcome = plan_candidate(config, ground, policy, hint)?;
            if let (false, Ok(plan)) = (policy.in_backward, &outcome) {
                hint = Some(plan.micro);
            }
            planned.push((at, outcome));
        }
        Ok(planned)
    };
    let chain = &chain;
    let chains = side_by_side((0..CHAINS).map(|from| move || chain(from)).collect());
    let mut planned = Vec::with_capacity(policies.len());
    for chain in chains {
        planned.extend(chain?);
    }
    planned.sort_by_key(|(at, _)| *at);
    Ok(planned.into_iter().map(|(_, outcome)| outcome).collect())
}

/// Chains of candidates a tier is planned in (see [`plan_tier`]).
const CHAINS: usize = 2;

/// The plan of `config` with `policy`'s techniques, searched from `hint` (the micro-batch of
/// a like candidate that fit), or why it does not fit.
fn plan_candidate(
    config: &TrainConfig,
    ground: &Ground<'_>,
    policy: Policy,
    hint: Option<usize>,
) -> Result<Planned> {
    let mut candidate = config.clone();
    policy.apply(&mut candidate);
    let outcome = if let Some(plan) = whole_batch_at_largest_chunk(&candidate, ground)? {
        Ok(Ok(plan))
    } else if policy.in_backward {
        plan_whole_batch(&candidate, ground).map(|plan| plan.ok_or(None))
    } else if hint.is_none() && one_sample_exceeds(&candidate, ground)? {
        // Where one sample is known to fit, the search shows as soon as this would.
        Ok(Err(None))
    } else {
        search_micro_batch(&candidate, ground, hint)
            .map(|searched| searched.map_err(|oom| Some(Failed::Unexplained(Box::new(oom)))))
    };
    match outcome {
        Err(err @ (Error::DoesNotFit { .. } | Error::Config { .. })) => {
            Ok(Err(Some(Failed::Error(err))))
        }
        other => other,
    }
}

/// Why the chosen candidate won: the fastest predicted step of those that fit.
fn fastest_of(fitting: usize) -> String {
    match fitting {
        1 => "the only candidate that fits".into(),
        n => format!("the fastest predicted step of the {n} that fit"),
    }
}

/// True when a step of one sample alone, which peaks no higher than any step in micro-batches
/// of one, exceeds the whole limit: the candidate cannot fit, known from one probe of one
/// micro-batch instead of a search whose smallest probes run the whole batch.
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
    let whole = ground.whole_batch(config);
    if !prober.fits(whole, ground.budget.step_limit(margin))? {
        return Ok(None);
    }
    answer(&mut prober, whole, ground.budget, margin, false).map(Some)
}

/// The probe of micro-batches of `micro` with `config` and a head chunk of `rows`, and the
/// prober when its step fits `step_limit`.
fn probe_chunk(
    (micro, step_limit): (usize, u64),
    config: &TrainConfig,
    rows: usize,
    ground: &Ground<'_>,
) -> Result<(ChunkProbe, Option<Prober>)> {
    let mut config = config.clone();
    config.model.head_chunk = Some(rows);
    let mut prober = ground.prober(&config);
    let peak = match prober.probe(micro)? {
        Probed::Peak(peak) => Some(*peak),
        Probed::OutOfMemory(_) => None,
    };
    let fits = peak.is_some_and(|p| p <= step_limit);
    Ok((ChunkProbe { rows, peak, fits }, fits.then_some(prober)))
}

/// Makes the chunk `rows`, whose probes of the plan's micro-batch `prober` holds, the plan's:
/// its peak, its step time and its breakdowns.
fn take_chunk(plan: &mut Plan, rows: usize, mut prober: Prober) -> Result<()> {
    let Some(breakdown) = prober.breakdown(plan.micro)? else {
        return Ok(());
    };
    plan.head_chunk = Some(rows);
    plan.predicted_seconds = breakdown.seconds;
    plan.predicted_communication = breakdown.communicated;
    plan.predicted_host_peak = breakdown.host_peak;
    plan.peak_by_tag = largest_first(breakdown.tags.clone());
    plan.saved_by_op = breakdown.saved.clone();
    if let Probed::Peak(peak) = prober.probe(plan.micro)? {
        plan.predicted_peak = *peak;
    }
    Ok(())
}

/// A step of one sample that ran out of memory, with the probes of its configuration: the
/// diagnosis is asked for only where it is told.
struct Unexplained {
    prober: Prober,
    report: Box<OomReport>,
}

impl Unexplained {
    /// The error that says what holds the memory and what would fit.
    fn explain(self) -> Result<Error> {
        let diagnosis = self.prober.explain(&self.report, Failure::OneSample)?;
        Ok(Error::DoesNotFit {
            diagnosis,
            report: self.report,
        })
    }
}

/// Why the last candidate planned did not fit, as its planning said.
enum Failed {
    Unexplained(Box<Unexplained>),
    Error(Error),
}

/// The micro-batch part of [`plan`], with `config`'s head chunk.
fn plan_micro_batch(config: &TrainConfig, ground: &Ground<'_>) -> Result<Plan> {
    search_micro_batch(config, ground, None)?.or_else(|oom| Err(oom.explain()?))
}

/// [`plan_micro_batch`] from `hint` (see [`largest_fitting`]), where a step of one sample that
/// runs out of memory is left unexplained.
fn search_micro_batch(
    config: &TrainConfig,
    ground: &Ground<'_>,
    hint: Option<usize>,
) -> Result<std::result::Result<Plan, Unexplained>> {
    let budget = ground.budget;
    let mut prober = ground.prober(config);
    let margin = config.batch.margin.unwrap_or(DEFAULT_MARGIN);
    let max = ground.whole_batch(config);
    let micro = largest_fitting(&mut prober, max, budget.step_limit(margin), hint)?;
    if micro > 0 {
        return Ok(Ok(answer(&mut prober, micro, budget, margin, false)?));
    }
    // Nothing fits: the search ended on one sample, whose outcome says why.
    let one = match prober.probe(1)?.clone() {
        Probed::OutOfMemory(report) => {
            return Ok(Err(Unexplained { prober, report }));
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
    let micro = largest_fitting(&mut prober, max, budget.step_limit(shrunk), None)?.max(1);
    Ok(Ok(answer(&mut prober, micro, budget, shrunk, true)?))
}

/// Guesses of [`largest_fitting`] before it bisects what is left: enough for a peak close to
/// linear in the micro-batch, few enough that a peak far from it costs little.
const GUESSES: usize = 4;

/// The largest size in `1..=max` whose step fits `step_limit` (0 if not even one sample's
/// does): a size whose step fits where the next one's does not. The whole batch first; then
/// `hint` (a like candidate's answer), or one sample; then sizes guessed where the peak, taken
/// as linear in the size, would meet the limit; at last a bisection of what is left.
///
/// A step's peak grows with its micro-batch by what each sample's activations add. A guess
/// is the lower of two lines' sizes at the limit: the line through the two largest sizes found
/// to fit (or from the largest, with the slope of its activations), and the line from it to
/// the smallest size found not to fit, whose peak is at least what its step held when memory
/// ran out. A guess or two lands on the size that fits and the next that does not, where a
/// bisection takes the logarithm of the batch.
fn largest_fitting(
    prober: &mut Prober,
    max: usize,
    step_limit: u64,
    hint: Option<usize>,
) -> Result<usize> {
    if prober.fits(max, step_limit)? {
        return Ok(max);
    }
    if max == 1 {
        return Ok(0);
    }
    // The two largest sizes known to fit with their peaks; the smallest known not to, with
    // the least its peak would be.
    let (mut below, mut fits): (Option<Point>, Option<Point>) = (None, None);
    let mut fails = (max, least_peak(prober.probe(max)?));
    let mut size = hint.map_or(1, |h| h.clamp(1, max - 1));
    let mut guesses = 0;
    loop {
        match *prober.probe(size)? {
            Probed::Peak(peak) if peak <= step_limit => (below, fits) = (fits, Some((size, peak))),
            ref outcome => fails = (size, least_peak(outcome)),
        }
        let Some((at, peak)) = fits else {
            // Nothing found to fit yet: one sample, the last resort.
            if fails.0 == 1 {
                return Ok(0);
            }
            size = 1;
            continue;
        };
        let gap = fails.0 - at;
        if gap <= 1 {
            return Ok(at);
        }
        let room = (step_limit - peak) as f64;
        let ahead = match below {
            Some((lower, lower_peak)) => {
                room * (at - lower) as f64 / peak.saturating_sub(lower_peak) as f64
            }
            None => room * at as f64 / activations(prober, at) as f64,
        };
        let between = match fails.1 {
            Some(over) if over > peak => room * gap as f64 / (over - peak) as f64,
            _ => f64::INFINITY,
        };
        let guess = ahead.min(between).floor();
        size = match guesses < GUESSES && guess < gap as f64 {
            true => {
                guesses += 1;
                at + (guess as usize).max(1)
            }
            // The lines say nothing of use (a guess beyond a size known not to fit, or none).
            false => at + gap / 2,
        };
    }
}

/// The least peak the step of `outcome` would reach on the device: its peak, or what it held
/// and asked for when the device ran out of memory; none when the host tier ran out.
fn least_peak(outcome: &Probed) -> Option<u64> {
    match outcome {
        Probed::Peak(peak) => Some(*peak),
        Probed::OutOfMemory(report) if report.source != HOST_TIER => {
            Some(report.in_use + report.requested)
        }
        Probed::OutOfMemory(_) => None,
    }
}

/// A size probed, with its step's peak.
type Point = (usize, u64);

/// What the activations of the step in micro-batches of `micro` held at most, tag by tag.
fn activations(prober: &Prober, micro: usize) -> u64 {
    prober
        .tags(micro)
        .unwrap_or_default()
        .iter()
        .filter(|t| t.tag.starts_with("activations"))
        .map(|t| t.peak)
        .sum()
}

/// The plan of `micro` under `budget` with `margin`, its probes read from `prober`.
fn answer(
    prober: &mut Prober,
    micro: usize,
    budget: &Budget,
    margin: f64,
    margin_shrunk: bool,
) -> Result<Plan> {
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
    let breakdown = prober.breakdown(micro)?.cloned().unwrap_or_default();
    Ok(Plan {
        probes,
        micro,
        predicted_peak,
        predicted_host_peak: breakdown.host_peak,
        step_limit,
        margin,
        margin_shrunk,
        predicted_seconds: breakdown.seconds,
        predicted_communication: breakdown.communicated,
        peak_by_tag: largest_first(breakdown.tags),
        saved_by_op: breakdown.saved,
        head_chunk: None,
        chunk_probes: Vec::new(),
        policy: None,
    })
}

/// `tags` with the largest peak first.
fn largest_first(mut tags: Vec<TagBytes>) -> Vec<TagBytes> {
    tags.sort_by_key(|t| std::cmp::Reverse(t.peak));
    tags
}
