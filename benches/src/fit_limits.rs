//! What fits under a fixed limit, the second half of `fit-compare`: the largest micro-batch of
//! GPT-2 small whose step the memory policy fits under a limit (each micro-batch a whole step,
//! so that the optimizer step in the backward pass may be chosen; gradient clipping off), with
//! every technique or without whole-block recomputation; that plan confirmed by one real step
//! (its peak against the prediction, its time); a step at a given size (PyTorch's largest);
//! and the largest GPT-2 preset whose step of one sample fits.

use std::time::Instant;

use headroom_kernels::PlanTarget;
use headroom_trainer::config::{DataKind, PrecisionKind, Preset, Recompute, TrainConfig};
use headroom_trainer::data::Task;
use headroom_trainer::{Error, Plan, Result, Trainer, device, plan};

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

/// A step of `samples` of `preset` on the CPU's simulated device under `limit` bytes, in
/// `precision`, without clipping, the memory policy choosing among `techniques`.
pub fn config(
    preset: Preset,
    precision: PrecisionKind,
    samples: usize,
    limit: u64,
    techniques: Techniques,
) -> TrainConfig {
    let mut config = TrainConfig::over(Some(preset));
    config.run_dir = Some(std::env::temp_dir().join(format!(
        "headroom-fit-limit-{}-{}-{samples}",
        std::process::id(),
        precision.name()
    )));
    config.precision.dtype = precision;
    config.optimizer.clip = 0.0;
    if techniques == Techniques::NoBlocks {
        config.model.recompute = Some(Recompute::Cheap);
    }
    config.data.kind = DataKind::UniformTokens;
    config.data.train_size = samples.max(2);
    config.data.eval_size = 1;
    config.batch.size = samples;
    config.batch.micro = None;
    config.memory.capacity = "64GiB".into();
    config.memory.limit = Some(format!("{limit}B"));
    config.memory.history = 0;
    config.memory.trace = false;
    config.eval_every = 0;
    config
}

/// The plan of `config` when its whole batch fits as one micro-batch; none when it does not.
pub fn whole_batch_plan(config: &TrainConfig) -> Result<Option<Plan>> {
    let task = Task::from_config(&config.data, &config.model, config.seed)?;
    let budget = device::budget(config)?;
    match plan(config, &task, &budget, PlanTarget::Cpu) {
        Ok(plan) => Ok((plan.micro == config.batch.size).then_some(plan)),
        Err(Error::DoesNotFit { .. } | Error::Config { .. }) => Ok(None),
        Err(err) => Err(err),
    }
}

/// The largest number of samples in `1..=most` whose step fits as one micro-batch (galloping,
/// then bisection), with its plan; none when not even one sample fits.
pub fn largest(
    preset: Preset,
    precision: PrecisionKind,
    limit: u64,
    techniques: Techniques,
    most: usize,
) -> Result<Option<(usize, Plan)>> {
    let fits = |samples| whole_batch_plan(&config(preset, precision, samples, limit, techniques));
    let Some(mut best) = fits(1)?.map(|plan| (1, plan)) else {
        return Ok(None);
    };
    let mut fails = None;
    while fails.is_none() && best.0 < most {
        let next = (best.0 * 2).min(most);
        match fits(next)? {
            Some(plan) => best = (next, plan),
            None => fails = Some(next),
        }
    }
    if let Some(mut fails) = fails {
        while fails - best.0 > 1 {
            let mid = (best.0 + fails) / 2;
            match fits(mid)? {
                Some(plan) => best = (mid, plan),
                None => fails = mid,
            }
        }
    }
    Ok(Some(best))
}

/// One real step of `config`: its measured peak, the planner's prediction, the seconds it
/// took and the techniques the plan chose.
pub struct Confirmed {
    /// The allocator's peak over the step.
    pub peak: u64,
    /// The planner's prediction of it.
    pub predicted: u64,
    /// The step's seconds (it ends by reading its loss back).
    pub seconds: f64,
    /// The plan's techniques, in words.
    pub policy: String,
}

/// Runs one real step of `config` on the CPU.
pub fn confirm(config: TrainConfig) -> Result<Confirmed> {
    let mut trainer = Trainer::overwrite(config)?;
    let plan = trainer.plan().cloned();
    let started = Instant::now();
    trainer.train_step()?;
    let seconds = started.elapsed().as_secs_f64();
    let peak = trainer.device().allocator().stats().peak_in_use;
    std::fs::remove_dir_all(trainer.run_dir()).ok();
    Ok(Confirmed {
        peak,
        predicted: plan.as_ref().map_or(0, |p| p.predicted_peak),
        seconds,
        policy: plan
            .and_then(|p| p.policy)
            .map_or_else(String::new, |p| p.chosen.describe()),
    })
}
