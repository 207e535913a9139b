//! The planner: the largest micro-batch size whose step, probed on the meta device, peaks
//! within the limit less a safety margin, found by bisection.
//!
//! The margin leaves room for what the allocator does not see (a GPU's context, another
//! process). When the default margin is all that stands between the limit and one sample's
//! step, the planner halves it (down to none) until that step fits, and says so; a margin the
//! user set is never shrunk, and the error then names it as what does not fit.

use headroom_alloc::format_bytes;
use headroom_kernels::PlanTarget;

use crate::config::{DEFAULT_MARGIN, TrainConfig};
use crate::data::Task;
use crate::diagnosis::Failure;
use crate::error::{Error, Result};
use crate::memory::Budget;
use crate::probe::{Probed, Prober};
use crate::tag_bytes::TagBytes;

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
    #[serde(alias = "target")]
    pub step_limit: u64,
    /// The margin the target leaves, as a fraction of the limit: the configured one, or the
    /// default shrunk so that one sample fits.
    #[serde(default)]
    pub margin: f64,
    /// True when the default margin had to shrink for one sample to fit.
    #[serde(default)]
    pub margin_shrunk: bool,
    /// The most each tag held during the chosen size's step: the weights, the gradients, the
    /// optimizer state and each kind of layer's activations (`activations/attention`, ...).
    #[serde(default)]
    pub peak_by_tag: Vec<TagBytes>,
}

/// Finds the largest micro-batch size whose step fits `budget` with the configured margin, on
/// meta devices that allocate as `plan_target` does (a device's
/// [`Device::plan_target`](headroom_kernels::Device::plan_target)).
pub fn plan(
    config: &TrainConfig,
    task: &Task,
    budget: &Budget,
    plan_target: PlanTarget,
) -> Result<Plan> {
    let mut prober = Prober::new(config, task, *budget, plan_target);
    let margin = config.batch.margin.unwrap_or(DEFAULT_MARGIN);
    let max = config.batch.size.min(task.train.len()).max(1);
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

/// The largest size in `1..=max` whose step fits `step_limit`, by bisection (0 if none does).
fn largest_fitting(prober: &mut Prober, max: usize, step_limit: u64) -> Result<usize> {
    if prober.fits(max, step_limit)? {
        return Ok(max);
    }
    let (mut fits, mut fails) = (0, max);
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
    let mut peak_by_tag = prober.tags(micro).to_vec();
    peak_by_tag.sort_by_key(|t| std::cmp::Reverse(t.peak));
    Plan {
        probes,
        micro,
        predicted_peak,
        step_limit,
        margin,
        margin_shrunk,
        peak_by_tag,
    }
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
        if self.margin_shrunk {
            writeln!(
                f,
                "the default margin left no room for one sample: shrunk to {}",
                self.margin
            )?;
        }
        write!(
            f,
            "chosen: micro-batches of {} (predicted peak {} of the {} a step may use)",
            self.micro,
            format_bytes(self.predicted_peak),
            format_bytes(self.step_limit)
        )?;
        if !self.peak_by_tag.is_empty() {
            write!(f, "\nthe most each tag holds during its step:")?;
            for t in &self.peak_by_tag {
                write!(f, "\n  {:<24} {:>12}", t.tag, format_bytes(t.peak))?;
            }
        }
        Ok(())
    }
}
