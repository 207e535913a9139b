//! What fits under a fixed limit, the second half of `fit-compare`: on the CPU's simulated
//! device or a GPU, the largest micro-batch of GPT-2 small whose step the memory policy fits
//! under a limit (each micro-batch a whole step,
//! so that the optimizer step in the backward pass may be chosen; gradient clipping off), with
//! every technique or without whole-block recomputation; that plan confirmed by one real step
//! (its peak against the prediction, its time); a step at a given size (PyTorch's largest);
//! and the largest GPT-2 preset whose step of one sample fits.

use std::time::Instant;

use headroom_trainer::config::{DataKind, PrecisionKind, Preset, Recompute, TrainConfig};
use headroom_trainer::data::Task;
use headroom_trainer::planning::policy::{Candidate, Policy};
use headroom_trainer::planning::{plan, run_device};
use headroom_trainer::{Error, Result, Trainer};

/// Which memory techniques the policy may choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Techniques {
    /// Every one.
    Any,
    /// All but whole-block recomputation (recomputation pinned to `cheap`).
    NoBlocks,
}

impl Techniques {
    /// Its name in the bench's output.
    pub fn name(self) -> &'static str {
        match self {
            Techniques::Any => "any",
            Techniques::NoBlocks => "no-blocks",
        }
    }
}

/// The model a bench trains: a preset, at its own context or another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subject {
    /// The published shape.
    pub preset: Preset,
    /// Positions per sample; none for the preset's.
    pub context: Option<usize>,
}

impl Subject {
    /// The defaults over the preset, at the subject's context.
    pub fn config(self) -> TrainConfig {
        let mut config = TrainConfig::over(Some(self.preset));
        if let Some(context) = self.context {
            config.model.context = Some(context);
        }
        config
    }

    /// Positions per sample.
    pub fn context(self) -> usize {
        self.context.unwrap_or(self.preset.shape().context)
    }
}

/// A step of `samples` of `subject` on `device` (on the CPU, a simulated device of 64 GiB)
/// under `limit` bytes, in `precision`, without clipping, the memory policy choosing among
/// `techniques`.
pub fn config(
    device: &str,
    subject: Subject,
    precision: PrecisionKind,
    samples: usize,
    limit: u64,
    techniques: Techniques,
) -> TrainConfig {
    let mut config = subject.config();
    config.run_dir = Some(std::env::temp_dir().join(format!(
        "headroom-fit-limit-{}-{}-{samples}",
        std::process::id(),
        precision.name()
    )));
    config.device = device.to_owned();
    config.precision.dtype = precision;
    config.optimizer.clip = 0.0;
    if techniques == Techniques::NoBlocks {
        config.model.recompute = Some(Recompute::Cheap);
    }
    config.data.kind = DataKind::UniformTokens;
    // Enough windows for the steps a confirmation runs.
    config.data.train_size = 8 * samples.max(2);
    config.data.eval_size = 1;
    config.batch.size = samples;
    config.batch.micro = None;
    config.memory.capacity = headroom_alloc::ByteSize::gib(64);
    config.memory.limit = Some(limit.into());
    config.memory.history = 0;
    config.memory.trace = false;
    config.eval_every = 0;
    config
}

/// The techniques that fit `config`'s whole batch as one micro-batch, the fastest predicted
/// of those the memory policy weighed (in the tier of the optimizer state it settled on),
/// with that step's predicted peak; none when no combination does.
pub fn whole_batch_policy(config: &TrainConfig) -> Result<Option<(Policy, u64)>> {
    let task = Task::from_config(&config.data, &config.model, config.seed)?;
    let budget = run_device::budget(config)?;
    let target = run_device::plan_target(config, &budget)?;
    let planned = match plan(config, &task, &budget, target) {
        Ok(planned) => planned,
        Err(Error::DoesNotFit { .. } | Error::Config { .. }) => return Ok(None),
        Err(err) => return Err(err),
    };
    let Some(policy) = planned.policy else {
        return Ok(None);
    };
    let state = policy.chosen.state;
    let whole: Vec<&Candidate> = policy
        .candidates
        .iter()
        .filter(|c| c.micro == Some(config.batch.size) && c.policy.state == state)
        .collect();
    Ok(whole
        .into_iter()
        .min_by(|a, b| {
            let seconds = |c: &Candidate| c.predicted_seconds.unwrap_or(f64::INFINITY);
            seconds(a).total_cmp(&seconds(b))
        })
        .map(|c| (c.policy, c.predicted_peak.unwrap_or(0))))
}

/// The largest number of samples in `1..=most` whose step some combination of `techniques`
/// fits as one micro-batch (galloping, then bisection), with that combination; none when not
/// even one sample fits.
pub fn largest(
    device: &str,
    subject: Subject,
    precision: PrecisionKind,
    limit: u64,
    techniques: Techniques,
    most: usize,
) -> Result<Option<(usize, Policy)>> {
    largest_fitting(most, |samples| {
        let config = config(device, subject, precision, samples, limit, techniques);
        Ok::<_, Error>(whole_batch_policy(&config)?.map(|(policy, _)| policy))
    })
}

/// The largest `n` in `1..=most` for which `fits(n)` finds something, with what it found
/// (galloping from 1, then bisecting: a fit at `n` is taken to mean a fit at every size below);
/// none when not even 1 fits.
pub fn largest_fitting<T>(
    most: usize,
    mut fits: impl FnMut(usize) -> Result<Option<T>>,
) -> Result<Option<(usize, T)>> {
    let Some(first) = fits(1)? else {
        return Ok(None);
    };
    let mut best = (1, first);
    let mut fails = None;
    while fails.is_none() && best.0 < most {
        let next = (best.0 * 2).min(most);
        match fits(next)? {
            Some(found) => best = (next, found),
            None => fails = Some(next),
        }
    }
    if let Some(mut fails) = fails {
        while fails - best.0 > 1 {
            let mid = (best.0 + fails) / 2;
            match fits(mid)? {
                Some(found) => best = (mid, found),
                None => fails = mid,
            }
        }
    }
    Ok(Some(best))
}

/// A real run of `config`: the first step's measured peak against the planner's prediction,
/// the median seconds of the steps after it, and the techniques the plan chose.
pub struct Confirmed {
    /// The allocator's peak over the first step.
    pub peak: u64,
    /// The planner's prediction of it.
    pub predicted: u64,
    /// The median seconds of the timed steps (each ends by reading its loss back); the first
    /// step's when none was timed.
    pub seconds: f64,
    /// The plan's techniques, in words.
    pub policy: String,
}

/// Runs one real step of `config`, then `timed` more, timed (PyTorch's peer times the steps
/// after a warm-up alike).
pub fn confirm(config: TrainConfig, timed: usize) -> Result<Confirmed> {
    let mut trainer = Trainer::builder().config(config).overwrite().build()?;
    let plan = trainer.plan().cloned();
    let started = Instant::now();
    trainer.train_step()?;
    let first = started.elapsed().as_secs_f64();
    let peak = trainer.device().allocator().stats().peak_in_use;
    let mut times: Vec<f64> = (0..timed)
        .map(|_| {
            let started = Instant::now();
            trainer
                .train_step()
                .map(|_| started.elapsed().as_secs_f64())
        })
        .collect::<Result<_>>()?;
    times.sort_by(f64::total_cmp);
    std::fs::remove_dir_all(trainer.run_dir()).ok();
    Ok(Confirmed {
        peak,
        predicted: plan.as_ref().map_or(0, |p| p.predicted_peak),
        seconds: times.get(times.len() / 2).copied().unwrap_or(first),
        policy: plan
            .and_then(|p| p.policy)
            .map_or_else(String::new, |p| p.chosen.describe()),
    })
}
