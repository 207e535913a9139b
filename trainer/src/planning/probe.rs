//! Probes: one training step with a given micro-batch size on a meta device (allocations only,
//! no arithmetic) under a run's budget, and what it peaks at or the out-of-memory it meets.
//! The planner searches with them, the trainer asks them before it grows a micro-batch, and a
//! step that cannot fit is explained with them. A probe of many micro-batches runs its first
//! two and its last alone, which peak as the whole step does, so a probe costs a few
//! micro-batches whatever the batch; the micro-batches it leaves out are priced only when its
//! step time is asked for.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use headroom_alloc::OomReport;
use headroom_collectives::{PlannedRank, SharedWorld};
use headroom_kernels::{Device, DeviceConfig, PlanTarget};

use crate::config::TrainConfig;
use crate::data::{HostBatch, Task};
use crate::data_parallel::control::{self, Control};
use crate::error::{Error, Result};
use crate::model::ModelFactory;
use crate::planning::budget::{Budget, UNLIMITED};
use crate::planning::offloads;
use crate::planning::op_bytes::{OpBytes, op_bytes};
use crate::planning::rates::PlanRates;
use crate::planning::tag_bytes::{TagBytes, tag_bytes};
use crate::step::context::StepContext;
use crate::step::diagnosis::{Failure, diagnose};
use crate::step::precision::LossScaler;
use crate::step::train_step::{Sizes, train_step};

/// Where a probed step held its memory.
#[derive(Debug, Clone, Default)]
pub struct Breakdown {
    /// The most each tag held (the weights, the gradients, each kind of layer's activations).
    pub tags: Vec<TagBytes>,
    /// What the forward pass of a micro-batch saved for its backward pass, per kind of op
    /// (none when the step ran out of memory).
    pub saved: Vec<OpBytes>,
    /// The step's predicted seconds at the planned device's rates (0 when it ran out of
    /// memory).
    pub seconds: f64,
    /// What the step's collectives send from the rank, in bytes, and the seconds they take at
    /// the link's rate (part of `seconds`).
    pub communicated: (f64, f64),
    /// The most the host tier held, for a step that offloads to it.
    pub host_peak: Option<u64>,
}

/// What one probe found.
#[derive(Debug, Clone)]
pub enum Probed {
    /// The step ran; its peak bytes in use.
    Peak(u64),
    /// The step ran out of memory: the allocator's report.
    OutOfMemory(Box<OomReport>),
}

/// Runs probes of one configuration under one budget, remembering each size's outcome.
pub struct Prober {
    config: TrainConfig,
    task: Task,
    /// Builds the model on each probe's meta device.
    factory: Arc<dyn ModelFactory>,
    budget: Budget,
    plan_target: PlanTarget,
    /// What the planned work is priced at, the device's and the host's.
    rates: PlanRates,
    /// Every size probed, in the order first probed, with its outcome.
    seen: Vec<(usize, Probed)>,
    /// Where each size's step held its memory, by `seen`'s index.
    breakdowns: Vec<Breakdown>,
    /// By `seen`'s index, the full micro-batches a shortened probe left out, while their time
    /// is not yet in its breakdown's seconds.
    unpriced: Vec<Option<Shortened>>,
    /// `seen`'s index of each size.
    index: BTreeMap<usize, usize>,
    /// The task's first samples, as probes run them.
    samples: FirstSamples,
}

/// The first samples of a task, collected once and shared by the probers of one plan: a
/// probe of a large batch would otherwise spend most of its time gathering them again.
#[derive(Debug, Clone, Default)]
pub struct FirstSamples(Arc<Mutex<Option<HostBatch>>>);

impl FirstSamples {
    /// The first `count` samples of `task`'s training data.
    fn of(&self, task: &Task, count: usize) -> Result<HostBatch> {
        // A poisoned lock only means another probe panicked; what it holds is still whole.
        let mut held = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(batch) = held.as_ref().filter(|b| b.len() >= count) {
            return Ok(batch.slice(0, count));
        }
        let indices: Vec<usize> = (0..count).collect();
        let batch = HostBatch::collect(&*task.train, &indices)?;
        *held = Some(batch.clone());
        Ok(batch)
    }
}

impl Prober {
    /// Probes of `config` on `task` with the models `factory` builds, under `budget`, on meta
    /// devices that allocate as `plan_target` and price their steps at `rates`.
    pub fn new(
        config: &TrainConfig,
        task: &Task,
        factory: Arc<dyn ModelFactory>,
        budget: Budget,
        plan_target: PlanTarget,
        rates: PlanRates,
    ) -> Self {
        Self {
            config: config.clone(),
            task: task.clone(),
            factory,
            budget,
            plan_target,
            rates,
            seen: Vec::new(),
            breakdowns: Vec::new(),
            unpriced: Vec::new(),
            index: BTreeMap::new(),
            samples: FirstSamples::default(),
        }
    }

    /// The same probes, taking their samples from `samples`, which other probers of the same
    /// task share.
    pub fn sharing(mut self, samples: &FirstSamples) -> Self {
        self.samples = samples.clone();
        self
    }

    /// The outcome of a step in micro-batches of `micro` (probed once, then remembered).
    pub fn probe(&mut self, micro: usize) -> Result<&Probed> {
        let at = match self.index.get(&micro) {
            Some(&at) => at,
            None => {
                let (outcome, breakdown, unpriced) = self.run(micro, &self.budget)?;
                self.seen.push((micro, outcome));
                self.breakdowns.push(breakdown);
                self.unpriced.push(unpriced);
                self.index.insert(micro, self.seen.len() - 1);
                self.seen.len() - 1
            }
        };
        Ok(&self.seen[at].1)
    }

    /// True when a step in micro-batches of `micro` peaks at or below `step_limit` bytes.
    pub fn fits(&mut self, micro: usize, step_limit: u64) -> Result<bool> {
        Ok(matches!(self.probe(micro)?, Probed::Peak(peak) if *peak <= step_limit))
    }

    /// Every size probed so far, in the order first probed.
    pub fn seen(&self) -> &[(usize, Probed)] {
        &self.seen
    }

    /// Where the step in micro-batches of `micro` held its memory and what it takes, if it was
    /// probed (a shortened probe's left-out micro-batches priced now, once).
    pub fn breakdown(&mut self, micro: usize) -> Result<Option<&Breakdown>> {
        let Some(&at) = self.index.get(&micro) else {
            return Ok(None);
        };
        if let Some(shortened) = self.unpriced[at].take() {
            let each = self.one_more(&shortened, self.breakdowns[at].seconds)?;
            self.breakdowns[at].seconds += each * shortened.repeats as f64;
        }
        Ok(Some(&self.breakdowns[at]))
    }

    /// The most the host tier held in the step in micro-batches of `micro`, if it was probed
    /// and offloads.
    pub fn host_peak(&self, micro: usize) -> Option<u64> {
        self.index
            .get(&micro)
            .and_then(|&at| self.breakdowns[at].host_peak)
    }

    /// The most each tag held in the step in micro-batches of `micro`, if it was probed.
    pub fn tags(&self, micro: usize) -> Option<&[TagBytes]> {
        self.index
            .get(&micro)
            .map(|&at| self.breakdowns[at].tags.as_slice())
    }

    /// The diagnosis of `report`, an out-of-memory that `failure` describes: what the model,
    /// its gradients and its optimizer state need against the limit.
    pub fn explain(&self, report: &OomReport, failure: Failure) -> Result<String> {
        let config = &self.config;
        let roomy = Device::meta_for(self.plan_target, DeviceConfig::new(UNLIMITED))?;
        let host = offloads::planned(config, &roomy, self.rates.host)?;
        let world = planned_world(config, &roomy)?;
        let (model, optimizer) = offloads::build_training_state(
            config,
            (&*self.factory, &roomy, host.as_ref()),
            &self.task.train.shape(),
            world.as_ref(),
            |_| Ok(()),
        )?;
        Ok(diagnose((&*model, &*optimizer), &roomy, report, failure))
    }

    /// One step with micro-batches of `micro` on a fresh meta device of `budget`. A step of
    /// many micro-batches is probed by its first two and its last (see [`Shortened`]): the
    /// full micro-batches it left out come back with its outcome, for
    /// [`breakdown`](Self::breakdown) to price when asked.
    fn run(&self, micro: usize, budget: &Budget) -> Result<(Probed, Breakdown, Option<Shortened>)> {
        let samples = self.config.batch.size.min(self.task.train.len());
        let shortened = Shortened::of(samples, micro.max(1));
        // Only the samples the probe runs.
        let batch = self.samples.of(&self.task, shortened.sizes.iter().sum())?;
        let (peak, breakdown) = match self.step(&batch, &shortened.sizes, budget)? {
            Ok(stepped) => stepped,
            Err((outcome, breakdown)) => return Ok((outcome, breakdown, None)),
        };
        let unpriced = (shortened.repeats > 0).then_some(shortened);
        Ok((Probed::Peak(peak), breakdown, unpriced))
    }

    /// The seconds of one more full micro-batch of `shortened`'s step, which took `seconds`:
    /// that step less its first micro-batch, timed and subtracted. The step less a
    /// micro-batch holds no more than the step; it runs without a device limit all the same,
    /// which changes no work. Should its host tier run out all the same, each micro-batch run
    /// is taken to cost the same.
    fn one_more(&self, shortened: &Shortened, seconds: f64) -> Result<f64> {
        let fewer = &shortened.sizes[1..];
        let batch = self.samples.of(&self.task, fewer.iter().sum())?;
        let unlimited = Budget::unlimited(self.budget.growth);
        Ok(match self.step(&batch, fewer, &unlimited)? {
            Ok((_, fewer)) => (seconds - fewer.seconds).max(0.0),
            Err(_) => seconds / shortened.sizes.len() as f64,
        })
    }

    /// One step of the first samples of `batch` cut in `sizes` on a fresh meta device of
    /// `budget`: its peak and breakdown, or the out-of-memory it met as a probe's outcome.
    fn step(
        &self,
        batch: &HostBatch,
        sizes: &[usize],
        budget: &Budget,
    ) -> Result<std::result::Result<(u64, Breakdown), (Probed, Breakdown)>> {
        let batch = batch.slice(0, sizes.iter().sum());
        let config = &self.config;
        let device =
            Device::meta_with_rates(self.plan_target, self.rates.device, budget.device_config(0))?;
        let host = offloads::planned(config, &device, self.rates.host)?;
        let world = planned_world(config, &device)?;
        let built = offloads::build_training_state(
            config,
            (&*self.factory, &device, host.as_ref()),
            &self.task.train.shape(),
            world.as_ref(),
            |_| Ok(()),
        );
        let (mut model, mut optimizer) = match built {
            Ok(parts) => parts,
            Err(err) => return out_of_memory(err).map(Err),
        };
        // A rank of several holds its control buffer beside its model.
        let _control = match config.optimizer.launched_as {
            Some((_, ranks)) if ranks > 1 => match Control::new(&device) {
                Ok(control) => Some(control),
                Err(err) => return out_of_memory(err).map(Err),
            },
            _ => None,
        };
        let mut scaler = LossScaler::new(&config.precision);
        let mut ctx = StepContext::new(&device, &mut *model, &mut *optimizer, &mut scaler, config);
        match train_step(&mut ctx, &batch, 0, Sizes::Fixed(sizes)) {
            Ok(report) => {
                let stats = device.allocator().stats();
                let work = device.planned_work().unwrap_or_default();
                let breakdown = Breakdown {
                    tags: tag_bytes(&stats),
                    saved: op_bytes(&report.saved),
                    seconds: work.seconds,
                    communicated: (
                        work.communicated,
                        work.communicated / self.rates.device.link,
                    ),
                    host_peak: host.map(|h| h.allocator().stats().peak_in_use),
                };
                Ok(Ok((stats.peak_in_use, breakdown)))
            }
            Err(err) => out_of_memory(err).map(Err),
        }
    }
}

/// The micro-batches a probe runs for a step of a batch cut in micro-batches of one size.
///
/// From the second micro-batch on, each full one starts from the same memory (the weights,
/// their optimizer state and the one set of gradients the step sums into) and allocates the
/// same, so the step's peak, in all and per tag, is reached within its first two micro-batches
/// and its last: a probe runs those alone, and prices the full micro-batches it leaves out at
/// the work of one of them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shortened {
    /// The sizes the probe runs, in order.
    sizes: Vec<usize>,
    /// The full micro-batches of the step left out.
    repeats: usize,
}

impl Shortened {
    /// Full micro-batches beyond which a probe leaves the middle ones out: running two steps
    /// (the shortened one and one with a micro-batch fewer) must cost less than the whole.
    const FULL_KEPT: usize = 4;

    /// The probe of a batch of `samples` in micro-batches of `micro` (at least 1).
    fn of(samples: usize, micro: usize) -> Self {
        let (full, rest) = (samples / micro, samples % micro);
        let kept = if full > Self::FULL_KEPT { 2 } else { full };
        let mut sizes = vec![micro; kept];
        if rest > 0 {
            sizes.push(rest);
        }
        Self {
            sizes,
            repeats: full - kept,
        }
    }
}

/// An out-of-memory as a probe's outcome, with the bytes of each tag when it happened; any
/// other error as it is.
fn out_of_memory(err: Error) -> Result<(Probed, Breakdown)> {
    match err.oom_report() {
        Some(report) => {
            let tags = report
                .tags
                .iter()
                .map(|t| TagBytes {
                    tag: t.tag.name().to_owned(),
                    live: t.live,
                    peak: t.peak,
                })
                .collect();
            let breakdown = Breakdown {
                tags,
                saved: Vec::new(),
                seconds: 0.0,
                communicated: (0.0, 0.0),
                host_peak: None,
            };
            Ok((Probed::OutOfMemory(Box::new(report.clone())), breakdown))
        }
        None => Err(err),
    }
}

/// The world a probe's rank shards its parameters over where `config` shards them: the rank
/// it plans, of the run's ranks, on `device`, a meta device.
fn planned_world(config: &TrainConfig, device: &Device) -> Result<Option<SharedWorld>> {
    if !config.optimizer.shards_params() {
        return Ok(None);
    }
    let (rank, ranks) = config.optimizer.launched_as.unwrap_or((0, 1));
    let planned = PlannedRank::new(device, rank, ranks)?;
    let world = SharedWorld::new(Box::new(planned));
    Ok(Some(control::agreeing(&world)?))
}

#[cfg(test)]
mod tests {
    use super::Shortened;

    #[test]
    fn a_probe_of_many_micro_batches_runs_the_first_two_and_the_last() {
        let many = Shortened::of(128, 3);
        assert_eq!(many.sizes, [3, 3, 2]);
        assert_eq!(many.repeats, 40);
        let even = Shortened::of(128, 8);
        assert_eq!((even.sizes, even.repeats), (vec![8, 8], 14));
        let few = Shortened::of(10, 3);
        assert_eq!((few.sizes, few.repeats), (vec![3, 3, 3, 1], 0));
        let one = Shortened::of(8, 8);
        assert_eq!((one.sizes, one.repeats), (vec![8], 0));
    }
}
