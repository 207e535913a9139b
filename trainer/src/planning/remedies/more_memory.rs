//! The first change `headroom plan` plans when nothing fits: more memory, the same run under a
//! higher limit on the device, in the host tier, or both. The limits start from one step of
//! one sample with the lightest candidate on tiers without limits (the device's with the
//! planner's margin kept free), and grow by a quarter while the plan under them does not fit,
//! a few times at most, never beyond the device.

use std::sync::Arc;

use headroom_alloc::{ByteSize, format_bytes};
use headroom_kernels::PlanTarget;

use crate::config::{DEFAULT_MARGIN, PolicyKind, TrainConfig};
use crate::data::Task;
use crate::error::Result;
use crate::model::{BuiltinModel, ModelFactory};
use crate::planning::budget::Budget;
use crate::planning::policy;
use crate::planning::probe::{Probed, Prober};
use crate::planning::rates::rates;
use crate::planning::remedies::changes::Change;

/// Raised limits tried at most.
const TRIES: usize = 3;

/// What more memory would take: the limits to plan under, in turn, or why none will do.
pub(crate) enum MoreMemory {
    /// The changes to plan, the smallest first.
    Limits(Vec<Change>),
    /// One sample's step alone needs more than the device has: its peak.
    BeyondDevice(u64),
}

/// The raised limits to try for `config`, a built-in model's run on `task` that fits nothing
/// under `budget` on devices that allocate as `target`; none when no limit of its could change
/// that (one sample's step of the lightest candidate does not run even without limits).
pub(crate) fn more_memory(
    config: &TrainConfig,
    task: &Task,
    budget: &Budget,
    target: PlanTarget,
) -> Result<Option<MoreMemory>> {
    let Some((device, host)) = one_sample(config, task, budget, target)? else {
        return Ok(None);
    };
    let margin = config.batch.margin.unwrap_or(DEFAULT_MARGIN);
    let needed = (device as f64 / (1.0 - margin)).ceil() as u64;
    if needed > budget.capacity {
        return Ok(Some(MoreMemory::BeyondDevice(device)));
    }
    // The host tier's limit, where one is set and one sample's step exceeds it.
    let host_limit = config.memory.host_limit.as_ref().map(ByteSize::bytes);
    let host_needed = host.filter(|&h| host_limit.is_some_and(|limit| h > limit));
    // One sample fitting both tiers' limits but no step: more room on the device.
    let mut device = match (needed > budget.limit, host_needed) {
        (false, None) => budget.limit + budget.limit / 4,
        _ => needed.max(budget.limit),
    };
    let mut host = host_needed;
    let mut changes = Vec::new();
    for _ in 0..TRIES {
        let raise = device > budget.limit;
        let device_limit = rounded(device);
        if device_limit.bytes() > budget.capacity {
            break;
        }
        changes.push(raised(
            config,
            budget,
            raise.then_some(device_limit),
            host.map(rounded),
        ));
        device += device / 4;
        host = host.map(|h| h + h / 4);
    }
    Ok(Some(MoreMemory::Limits(changes)))
}

/// `config` under `device` and `host` limits where given.
fn raised(
    config: &TrainConfig,
    budget: &Budget,
    device: Option<ByteSize>,
    host: Option<ByteSize>,
) -> Change {
    let mut raised = config.clone();
    let mut budget = *budget;
    let (mut flags, mut keys) = (Vec::new(), Vec::new());
    if let Some(limit) = device {
        flags.push(format!("--memory-limit {limit}"));
        keys.push(format!("memory.limit = \"{limit}\""));
        budget.limit = limit.bytes();
        raised.memory.limit = Some(limit);
        raised.memory.fraction = None;
    }
    if let Some(limit) = host {
        flags.push(format!("--host-limit {limit}"));
        keys.push(format!("memory.host_limit = \"{limit}\""));
        raised.memory.host_limit = Some(limit);
    }
    Change {
        flags: flags.join(" "),
        keys: keys.join(", "),
        what: String::new(),
        config: raised,
        budget,
    }
}

/// `bytes` rounded up to a whole number of mebibytes, or of kibibytes below one mebibyte,
/// written so (as the bytes themselves, should that text not parse back).
fn rounded(bytes: u64) -> ByteSize {
    let (unit, shift) = match bytes < 1 << 20 {
        true => ("KiB", 10),
        false => ("MiB", 20),
    };
    let count = bytes.div_ceil(1 << shift);
    format!("{count}{unit}")
        .parse()
        .unwrap_or_else(|_| ByteSize::from(count << shift))
}

/// The peaks on the device and in the host tier (where it offloads) of a step in
/// micro-batches of one sample with the lightest candidate of `config`'s policy, on tiers
/// without limits; none if even that step fails.
fn one_sample(
    config: &TrainConfig,
    task: &Task,
    budget: &Budget,
    target: PlanTarget,
) -> Result<Option<(u64, Option<u64>)>> {
    let factory: Arc<dyn ModelFactory> = Arc::new(BuiltinModel(config.model.clone()));
    let mut lightest = config.clone();
    if config.memory.policy == PolicyKind::Auto {
        let knobs = factory.knobs(&task.train.shape());
        if let Some(policy) = policy::lightest(config, knobs) {
            policy.apply(&mut lightest);
        }
    }
    lightest.memory.host_limit = None;
    let unlimited = Budget::unlimited(budget.growth);
    let rates = rates(&config.memory, target)?;
    let mut prober = Prober::new(&lightest, task, factory, unlimited, target, rates);
    Ok(match prober.probe(1)? {
        Probed::Peak(peak) => Some((*peak, prober.host_peak(1))),
        Probed::OutOfMemory(_) => None,
    })
}

/// The sentence of a step of one sample that needs more than the device has.
pub(crate) fn beyond_device(peak: u64, budget: &Budget) -> String {
    format!(
        "one sample's step alone peaks at {} on the device with the lightest memory \
         techniques, which with the planner's margin is more than the device's {}",
        format_bytes(peak),
        format_bytes(budget.capacity)
    )
}
