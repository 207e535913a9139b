//! What `headroom plan` suggests for a built-in model's run: when nothing fits, each change it
//! planned that fits (more memory, then the changes of [`changes`], from the one that changes
//! the least); under the manual policy, each lighter recomputation that fits a larger
//! micro-batch. Every suggestion is a run the planner planned, with its micro-batch and both
//! tiers' predicted peaks, and none is already in force.
//!
//! LoRA changes what is trained and QLoRA the base's values, bf16 parameters round each update
//! and bf16 products each product: the memory policy chooses none of them by itself; the plan
//! names the runs for the user to choose.

use std::sync::Arc;

use headroom_alloc::format_bytes;
use headroom_kernels::PlanTarget;

use crate::config::{ModelFamily, ModelKind, Recompute, TrainConfig};
use crate::data::Task;
use crate::error::{Error, Result};
use crate::model::{BuiltinModel, ModelFactory};
use crate::planning::budget::Budget;
use crate::planning::plan::Plan;
use crate::planning::policy::Policy;
use crate::planning::search;
use crate::planning::side_by_side::side_by_side;

pub(crate) mod changes;
pub(crate) mod more_memory;

use changes::{Change, changes};
use more_memory::{MoreMemory, beyond_device, more_memory};

/// `err`, the planner's error for `config` (a built-in model's run on `task` under `budget`, on
/// devices that allocate as `target`), with the changes that fit added where nothing fit; any
/// other error as it is.
pub fn advise(
    config: &TrainConfig,
    task: &Task,
    budget: &Budget,
    target: PlanTarget,
    err: Error,
) -> Result<Error> {
    let Error::DoesNotFit { diagnosis, report } = err else {
        return Ok(err);
    };
    // More memory first, then each change, all planned side by side.
    let changes = changes(config, task, budget);
    let mut jobs: Vec<Job<'_>> = vec![Box::new(|| more_memory_line(config, task, budget, target))];
    for change in &changes {
        jobs.push(Box::new(move || {
            Ok(match planned(change, task, target)? {
                Some(line) => Said::Fits(line),
                None => Said::Unfit(change.flags.clone()),
            })
        }));
    }
    let mut text = diagnosis;
    let (mut fitting, mut unfit) = (0, Vec::new());
    for said in side_by_side(jobs) {
        match said? {
            Said::Fits(line) => {
                text.push_str(&format!("\nsuggestion: {line}"));
                fitting += 1;
            }
            Said::Unfit(flags) => unfit.push(flags),
            Said::Fact(fact) => text.push_str(&format!("\n{fact}")),
            Said::Nothing => {}
        }
    }
    if !unfit.is_empty() {
        let these = if fitting == 0 {
            "none of these"
        } else {
            "these other"
        };
        text.push_str(&format!(
            "\n{these} changes, planned, fit nothing either: {}",
            unfit.join("; ")
        ));
    }
    Ok(Error::DoesNotFit {
        diagnosis: text,
        report,
    })
}

/// One piece of the advice, planned on a thread of its own.
type Job<'a> = Box<dyn FnOnce() -> Result<Said> + Send + 'a>;

/// What one change planned says.
enum Said {
    /// It fits: its line.
    Fits(String),
    /// It fits nothing either: its flags.
    Unfit(String),
    /// A sentence of fact.
    Fact(String),
    /// Nothing.
    Nothing,
}

/// The line of the least more memory under which `config`'s run fits, or why none will do.
fn more_memory_line(
    config: &TrainConfig,
    task: &Task,
    budget: &Budget,
    target: PlanTarget,
) -> Result<Said> {
    Ok(match more_memory(config, task, budget, target)? {
        Some(MoreMemory::Limits(limits)) => match first_that_fits(&limits, task, target)? {
            Some(line) => Said::Fits(line),
            None => limits
                .first()
                .map_or(Said::Nothing, |c| Said::Unfit(c.flags.clone())),
        },
        Some(MoreMemory::BeyondDevice(peak)) => Said::Fact(beyond_device(peak, budget)),
        None => Said::Nothing,
    })
}

/// Under the manual policy, for a GPT whose `chosen` plan needs several micro-batches a step:
/// each recomputation lighter on memory than `config`'s that fits, with its plan.
pub fn lighter_recomputations(
    config: &TrainConfig,
    task: &Task,
    budget: &Budget,
    target: PlanTarget,
    chosen: &Plan,
) -> Result<Vec<String>> {
    let batch = config.batch.size.min(task.train.len());
    if chosen.policy.is_some() || config.model.kind != ModelKind::Gpt || chosen.micro >= batch {
        return Ok(Vec::new());
    }
    let swiglu = config.model.family == ModelFamily::Llama;
    let lighter = [
        (
            Recompute::Cheap,
            "--recompute cheap",
            "each norm's and GELU's output computed again",
        ),
        (
            Recompute::CheapUp,
            "--recompute cheap-up",
            "and each SwiGLU MLP's up projection",
        ),
        (
            Recompute::Blocks,
            "--recompute",
            "each block run again in the backward pass",
        ),
        (
            Recompute::BlocksTiled,
            "--recompute blocks-tiled",
            "and each MLP over tiles of the sequence",
        ),
    ];
    let plans = lighter
        .into_iter()
        .filter(|&(recompute, ..)| {
            (recompute != Recompute::CheapUp || swiglu)
                && config.model.recompute.unwrap_or_default() < recompute
        })
        .map(|(recompute, flags, what)| {
            move || {
                let mut recomputing = config.clone();
                recomputing.model.recompute = Some(recompute);
                let plan = quietly_planned(&recomputing, task, budget, target);
                plan.ok()
                    .map(|plan| format!("with {flags} ({what}): {}", figures(&plan, &recomputing)))
            }
        })
        .collect();
    Ok(side_by_side(plans).into_iter().flatten().collect())
}

/// The line of the first of `changes` whose run fits, if any does.
fn first_that_fits(changes: &[Change], task: &Task, target: PlanTarget) -> Result<Option<String>> {
    for change in changes {
        if let Some(line) = planned(change, task, target)? {
            return Ok(Some(line));
        }
    }
    Ok(None)
}

/// The line of `change` planned on `task`, if its run fits.
fn planned(change: &Change, task: &Task, target: PlanTarget) -> Result<Option<String>> {
    let config = &change.config;
    let Ok(plan) = quietly_planned(config, task, &change.budget, target) else {
        return Ok(None);
    };
    let what = match change.what.is_empty() {
        true => String::new(),
        false => format!(", {}", change.what),
    };
    Ok(Some(format!(
        "{} ({}){what}: {}",
        change.flags,
        change.keys,
        figures(&plan, config)
    )))
}

/// The plan of `config`, a built-in model's run, whose warnings (a margin shrunk, a narrower
/// optimizer state) are the suggested run's to give, not this one's.
fn quietly_planned(
    config: &TrainConfig,
    task: &Task,
    budget: &Budget,
    target: PlanTarget,
) -> Result<Plan> {
    let factory: Arc<dyn ModelFactory> = Arc::new(BuiltinModel(config.model.clone()));
    tracing::dispatcher::with_default(&tracing::Dispatch::none(), || {
        search::plan_with(config, task, &factory, budget, target)
    })
}

/// A plan's figures: its micro-batch and its predicted peaks on the device and in the host
/// tier, with what the host tier holds.
fn figures(plan: &Plan, config: &TrainConfig) -> String {
    let policy = plan
        .policy
        .as_ref()
        .map_or_else(|| Policy::manual(config), |p| p.chosen);
    let host = match plan.predicted_host_peak {
        Some(peak) => format!(
            "the host tier's {} ({})",
            format_bytes(peak),
            host_uses(policy)
        ),
        None => "nothing in the host tier".into(),
    };
    format!(
        "micro-batches of {}, predicted peak {} of the {} a step may use, {host}",
        plan.micro,
        format_bytes(plan.predicted_peak),
        format_bytes(plan.step_limit),
    )
}

/// What a run with `policy` keeps in the host tier.
fn host_uses(policy: Policy) -> String {
    let mut uses = Vec::new();
    if policy.offload_weights {
        uses.push("the blocks' weights, streamed to the device a block at a time");
    }
    if policy.offload_activations {
        uses.push("the recomputed blocks' inputs");
    }
    if policy.offload_optimizer {
        uses.push("the optimizer's state and updates");
    }
    uses.join("; ")
}
