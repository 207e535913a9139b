//! The planner: one training step on the meta device (allocations only, no arithmetic) for
//! candidate micro-batch sizes, searched by bisection for the largest whose peak fits the limit
//! with a safety margin.

use headroom_alloc::{AllocatorConfig, OomReport};
use headroom_kernels::{Device, DeviceConfig, PlanTarget};

use crate::config::{TrainConfig, validate::Budget};
use crate::data::{HostBatch, Task};
use crate::diagnosis::diagnose;
use crate::error::{Error, Result};
use crate::model::TrainModel;
use crate::optim::build_optimizer;
use crate::precision::LossScaler;
use crate::step::{Sizes, StepContext, train_step};

/// One probe: a micro-batch size and the peak memory of a step with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Probe {
    /// The micro-batch size.
    pub micro: usize,
    /// The step's peak bytes in use; none when it ran out of memory.
    pub peak: Option<u64>,
    /// True when the peak fits the limit with the margin.
    pub fits: bool,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    /// Every probe, in the order run.
    pub probes: Vec<Probe>,
    /// The largest micro-batch size that fits.
    pub micro: usize,
    /// Its predicted peak.
    pub predicted_peak: u64,
    /// The most a step may use: the limit less the margin.
    pub target: u64,
}

/// The device configuration of a run's budget, with `history` events recorded. Free chunks
/// are split whenever anything would be left over (as PyTorch's allocator does for large
/// blocks), instead of handing out up to twice the request: on a training step's mix of sizes
/// that lowers the peak by several percent and costs no measurable time.
pub fn device_config(budget: &Budget, history: usize) -> DeviceConfig {
    DeviceConfig::new(budget.device).with_allocator(
        AllocatorConfig::default()
            .with_limit_bytes(budget.limit)
            .with_growth(budget.growth)
            .with_max_internal_fragmentation(headroom_alloc::GRANULE)
            .with_history(history),
    )
}

/// A step's outcome on the meta device.
enum Outcome {
    Peak(u64),
    OutOfMemory(Box<OomReport>, String),
}

/// Runs one step with micro-batches of `micro` on a meta device of `budget` that allocates
/// as `target` does.
fn probe(
    config: &TrainConfig,
    task: &Task,
    (budget, target): (&Budget, PlanTarget),
    micro: usize,
) -> Result<Outcome> {
    let device = Device::meta_for(target, device_config(budget, 0))?;
    let oom = |err: Error, model: Option<(&TrainModel, &dyn headroom_nn::Optimizer)>| match (
        err.oom_report().cloned(),
        model,
    ) {
        (Some(report), Some((m, o))) => {
            let one = one_sample(config, task, (budget, target));
            let diagnosis = diagnose(m, o, &report, one);
            Ok(Outcome::OutOfMemory(Box::new(report), diagnosis))
        }
        (Some(report), None) => {
            // The model did not even get built: measure it on a meta device without a limit.
            let roomy = Device::meta_for(target, DeviceConfig::new(1 << 50))?;
            let model = TrainModel::build(&config.model, task.train.shape(), &roomy, config.seed)?;
            let optimizer = build_optimizer(&config.optimizer, model.module())?;
            let diagnosis = diagnose(
                &model,
                &*optimizer,
                &report,
                one_sample(config, task, (budget, target)),
            );
            Ok(Outcome::OutOfMemory(Box::new(report), diagnosis))
        }
        (None, _) => Err(err),
    };
    let built = TrainModel::build(&config.model, task.train.shape(), &device, config.seed)
        .and_then(|model| Ok((build_optimizer(&config.optimizer, model.module())?, model)));
    let (mut optimizer, mut model) = match built {
        Ok(parts) => parts,
        Err(err) => return oom(err, None),
    };
    let indices: Vec<usize> = (0..config.batch.size.min(task.train.len())).collect();
    let batch = HostBatch::collect(&*task.train, &indices);
    let mut sizes = vec![micro; batch.len() / micro];
    if !batch.len().is_multiple_of(micro) {
        sizes.push(batch.len() % micro);
    }
    let mut scaler = LossScaler::new(&config.precision);
    let mut ctx = StepContext {
        device: &device,
        model: &mut model,
        optimizer: &mut *optimizer,
        scaler: &mut scaler,
        precision: config.precision.dtype,
        clip: config.optimizer.clip,
    };
    match train_step(&mut ctx, &batch, 0, Sizes::Fixed(&sizes)) {
        Ok(_) => Ok(Outcome::Peak(device.allocator().stats().peak_in_use)),
        Err(err) => oom(err, Some((&model, &*optimizer))),
    }
}

/// The peak of a step with one sample on a meta device without a limit (none if even that
/// fails, which only an impossible model would).
fn one_sample(
    config: &TrainConfig,
    task: &Task,
    (budget, target): (&Budget, PlanTarget),
) -> Option<u64> {
    if budget.limit >= 1 << 50 {
        return None;
    }
    let unlimited = Budget {
        device: 1 << 50,
        limit: 1 << 50,
        growth: budget.growth,
    };
    match probe(config, task, (&unlimited, target), 1) {
        Ok(Outcome::Peak(peak)) => Some(peak),
        _ => None,
    }
}

/// Finds the largest micro-batch size whose step fits `budget` with the configured margin, on
/// meta devices that allocate as `plan_target` does (a device's [`Device::plan_target`]).
pub fn plan(
    config: &TrainConfig,
    task: &Task,
    budget: &Budget,
    plan_target: PlanTarget,
) -> Result<Plan> {
    let target = (budget.limit as f64 * (1.0 - config.batch.margin)) as u64;
    let mut probes = Vec::new();
    let mut last_failure = None;
    let mut run = |micro: usize, probes: &mut Vec<Probe>| -> Result<bool> {
        let (peak, fits) = match probe(config, task, (budget, plan_target), micro)? {
            Outcome::Peak(peak) => (Some(peak), peak <= target),
            Outcome::OutOfMemory(report, diagnosis) => {
                last_failure = Some((report, diagnosis));
                (None, false)
            }
        };
        probes.push(Probe { micro, peak, fits });
        Ok(fits)
    };
    let max = config.batch.size.min(task.train.len()).max(1);
    let mut fits = 0;
    if run(max, &mut probes)? {
        fits = max;
    } else {
        let mut fails = max;
        while fails - fits > 1 {
            let mid = (fits + fails) / 2;
            if run(mid, &mut probes)? {
                fits = mid;
            } else {
                fails = mid;
            }
        }
    }
    if fits == 0 {
        let (report, diagnosis) = match last_failure {
            Some(failure) => failure,
            None => {
                let peak = probes.first().and_then(|p| p.peak).unwrap_or(0);
                return Err(Error::config(format!(
                    "memory.limit: one sample's step peaks at {}, above the {} the margin leaves",
                    headroom_alloc::format_bytes(peak),
                    headroom_alloc::format_bytes(target)
                )));
            }
        };
        return Err(Error::DoesNotFit { diagnosis, report });
    }
    let predicted_peak = probes
        .iter()
        .find(|p| p.micro == fits)
        .and_then(|p| p.peak)
        .unwrap_or(0);
    Ok(Plan {
        probes,
        micro: fits,
        predicted_peak,
        target,
    })
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use headroom_alloc::format_bytes;
        writeln!(
            f,
            "{:>12} {:>14} {:>6}",
            "micro-batch", "predicted peak", "fits"
        )?;
        let mut probes = self.probes.clone();
        probes.sort_by_key(|p| p.micro);
        for p in probes {
            let peak = p.peak.map_or_else(|| "out of memory".into(), format_bytes);
            writeln!(
                f,
                "{:>12} {:>14} {:>6}",
                p.micro,
                peak,
                if p.fits { "yes" } else { "no" }
            )?;
        }
        write!(
            f,
            "chosen: micro-batches of {} (predicted peak {} of the {} target)",
            self.micro,
            format_bytes(self.predicted_peak),
            format_bytes(self.target)
        )
    }
}
