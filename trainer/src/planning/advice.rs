//! What `headroom plan` says: how the ranks of a data-parallel run plan, the rates a
//! calibration measured, a device that is not here, the plan, and under a manual policy what
//! recomputing would fit; or, where nothing fits, what would instead.

use std::fmt;

use headroom_alloc::ByteSize;

use crate::config::{RatesKind, TrainConfig};
use crate::data::Task;
use crate::data_parallel::Launch;
use crate::error::{Error, Result};
use crate::planning::plan::Plan;
use crate::planning::rates::calibrate;
use crate::planning::remedies::{advise, lighter_recomputations};
use crate::planning::run_device;
use crate::planning::search::{fullest_rank, plan};

/// What `headroom plan` says of a run, in order, and where it stopped.
#[derive(Debug)]
pub struct PlanAdvice {
    /// The lines before the plan: how the ranks plan, the calibrated rates, a device that is
    /// not here.
    pub notes: Vec<String>,
    /// The plan, where one was made.
    pub plan: Option<Plan>,
    /// The lines after it: what recomputing would fit, under a manual policy.
    pub lighter: Vec<String>,
    /// Why it stopped short: nothing fits (the error says what would), or another failure.
    pub error: Option<Error>,
}

impl PlanAdvice {
    /// Plans `requested` for one rank of `world_size` (the one that keeps the most optimizer
    /// state), with the device's rates measured first where `calibrate` asks. An error before
    /// anything is said is returned; one after is kept in [`error`](Self::error).
    pub fn new(requested: TrainConfig, world_size: usize, calibrate: bool) -> Result<Self> {
        let task = Task::from_config(&requested.data, &requested.model, requested.seed)?;
        let size = world_size;
        let first = Launch { rank: 0, size }.prepare(requested.clone())?;
        let rank = fullest_rank(&first, &task, size)?;
        let launch = Launch { rank, size };
        let whole = launch.prepare(requested)?;
        let config = launch.rank_config(&whole);
        let mut advice = Self {
            notes: rank_notes(launch, &whole, &config),
            plan: None,
            lighter: Vec::new(),
            error: None,
        };
        advice.error = advice.plan_rank(config, &task, calibrate).err();
        Ok(advice)
    }

    /// Whether it says nothing (it stopped before its first line).
    pub fn is_empty(&self) -> bool {
        self.notes.is_empty() && self.plan.is_none() && self.lighter.is_empty()
    }

    /// The error it stopped at, if any.
    pub fn outcome(self) -> Result<()> {
        self.error.map_or(Ok(()), Err)
    }

    /// The plan of the rank whose configuration is `config`, with what is said on the way.
    fn plan_rank(&mut self, mut config: TrainConfig, task: &Task, calibrated: bool) -> Result<()> {
        if calibrated {
            self.notes.extend(calibration(&config)?);
            config.memory.rates = RatesKind::Calibrated;
        }
        let (budget, target, absent) = run_device::planning(&config)?;
        self.notes.extend(absent);
        let chosen = match plan(&config, task, &budget, target) {
            Ok(chosen) => self.plan.insert(chosen),
            // What would fit instead, each change planned.
            Err(err) => return Err(advise(&config, task, &budget, target, err)?),
        };
        self.lighter = lighter_recomputations(&config, task, &budget, target, chosen)?;
        Ok(())
    }
}

/// How the ranks of `launch` plan, where there are several: each for its shard of `whole`'s
/// batch (`config` is the rank's), and for the rank with the largest share of sharded state.
fn rank_notes(launch: Launch, whole: &TrainConfig, config: &TrainConfig) -> Vec<String> {
    let mut notes = Vec::new();
    if launch.is_distributed() {
        notes.push(format!(
            "each of {} ranks plans for its shard: {} samples of each batch of {}",
            launch.size, config.batch.size, whole.batch.size
        ));
    }
    if launch.is_distributed() && whole.optimizer.shard_state {
        notes.push(format!(
            "the optimizer state is sharded over the ranks: this is the plan of rank {}, which \
             keeps the largest share",
            launch.rank
        ));
    }
    if whole.optimizer.shard_grads {
        notes.push(format!(
            "gradients sharded over the ranks (ZeRO stage 2): rank {} keeps 1/{} of every \
             gradient and of the optimizer state, and each tensor gathered whole from its first \
             use in a step until the update",
            launch.rank, launch.size
        ));
    } else if whole.optimizer.shards_params() {
        notes.push(format!(
            "parameters sharded over the ranks (ZeRO stage 3): rank {} keeps 1/{} of every \
             tensor, its gradient and its optimizer state, and gathers each block whole as it \
             runs",
            launch.rank, launch.size
        ));
    }
    notes
}

/// The rates of the device of `config` (and on a GPU its host's CPU, where an offloaded
/// optimizer's updates run), measured and kept for runs with calibrated rates: one line each.
fn calibration(config: &TrainConfig) -> Result<Vec<String>> {
    // The run's device without its limit: the measurements need room of their own.
    let mut roomy = config.clone();
    roomy.memory.limit = None;
    roomy.memory.fraction = Some(1.0);
    roomy.memory.capacity = ByteSize::gib(1);
    let budget = run_device::budget(&roomy)?;
    let device = run_device::open(&roomy, &budget)?;
    let lines = calibrate(&device)?.into_iter().map(|calibrated| {
        let rates = calibrated.rates;
        format!(
            "calibrated {}: f32 products {:.1} GFLOP/s, bf16 products {:.1} GFLOP/s and their \
             packing {:.2} G pairs/s, other arithmetic {:.1} GFLOP/s, memory {:.1} GB/s, {:.1} \
             µs a kernel, copies to and from the host tier {:.1} GB/s ({})",
            calibrated.device,
            rates.matrix_flops / 1e9,
            rates.half_matrix_flops / 1e9,
            rates.packing / 1e9,
            rates.vector_flops / 1e9,
            rates.bytes / 1e9,
            rates.launch * 1e6,
            rates.transfer / 1e9,
            calibrated.path.display()
        )
    });
    Ok(lines.collect())
}

impl fmt::Display for PlanAdvice {
    /// Its lines, one after the other (what `headroom plan` prints, a line at a time).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let notes = self.notes.iter().map(|n| n as &dyn fmt::Display);
        let plan = self.plan.iter().map(|p| p as &dyn fmt::Display);
        let lighter = self.lighter.iter().map(|l| l as &dyn fmt::Display);
        for (i, line) in notes.chain(plan).chain(lighter).enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{line}")?;
        }
        Ok(())
    }
}
