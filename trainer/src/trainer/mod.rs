//! The trainer: a run's model, optimizer, data and memory, trained step by step. How a run
//! starts (claiming its directory, planning its micro-batch size on the meta device, or
//! restoring its checkpoint) is in `trainer/start.rs`; what a whole run does around the steps
//! (evaluation, metrics, checkpoints, artifacts) in `trainer/run.rs`. A run is put together
//! from Rust with the builder (`builder.rs`); the user's code runs around the loop as callbacks
//! (`callback.rs`), and a signal stops it cleanly (`interrupt.rs`), or before the first step
//! ends its start, leaving nothing (`unstarted.rs`).

pub(crate) mod builder;
pub mod callback;
pub mod interrupt;
mod run;
mod start;
mod unstarted;

pub(crate) use start::StartParts;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use headroom_collectives::Collective;
use headroom_kernels::Device;
use headroom_nn::checkpoint::HostState;
use headroom_nn::{LrSchedule, Module, Optimizer};

use crate::config::TrainConfig;
use crate::data::{Loader, Position, Task};
use crate::data_parallel::control::Control;
use crate::data_parallel::peers::Peers;
use crate::data_parallel::world::Launch;
use crate::data_parallel::{sharded_params, sharded_state};
use crate::error::{Error, Result};
use crate::model::TrainModel;
use crate::model::TrainableModel;
use crate::planning::budget::Budget;
use crate::planning::choice::Choice;
use crate::planning::micro_growth::GrowthCheck;
use crate::planning::plan::Plan;
use crate::planning::tag_bytes::tag_bytes;
use crate::run_dir::checkpoint::{self, TrainerState, checkpoint_path};
use crate::run_dir::record::{OomRecord, StepRecord};
use crate::run_dir::totals::Totals;
use crate::step::StepReport;
use crate::step::context::StepContext;
use crate::step::micro::MicroBatcher;
use crate::step::precision::LossScaler;
use crate::step::train_step::{Sizes, train_step};
use crate::trained::eval::evaluate;
use crate::trainer::callback::{Callback, Callbacks};

/// A run: its model, optimizer, data and memory, and where it stands.
pub struct Trainer {
    /// The configuration as given (validated, its paths and run directory resolved, as this
    /// rank trains it); the plan's choice is not written into it.
    config: TrainConfig,
    /// The memory techniques the run trains with beyond `config`.
    choice: Choice,
    files: RunFiles,
    budget: Budget,
    device: Device,
    /// The host tier offloaded activations wait in, if the run offloads.
    host: Option<Device>,
    task: Task,
    model: Box<dyn TrainableModel>,
    optimizer: Box<dyn Optimizer>,
    schedule: LrSchedule,
    total_steps: u64,
    /// Where the run stands: what a checkpoint saves.
    state: TrainerState,
    loader: Option<Loader>,
    plan: Option<Plan>,
    growth: GrowthCheck,
    pool: Arc<rayon::ThreadPool>,
    /// The last step's record, until [`run`](Self::run) writes it down.
    last: Option<StepRecord>,
    /// What the user runs around the loop.
    callbacks: Callbacks,
    /// The processes the run trains on: this one alone, or the ranks of a data-parallel run.
    world: Box<dyn Collective + Send>,
    /// The buffer the ranks of a data-parallel run agree through (none for one process).
    control: Option<Control>,
    /// The step at which a callback stopped the run.
    stopped_at: Option<u64>,
}

/// The files of a run that this process writes to.
struct RunFiles {
    /// The run's directory.
    dir: PathBuf,
    /// The step of the checkpoint this process resumed from.
    resumed_from: Option<u64>,
    /// The file this process streams its allocations to.
    trace: Option<PathBuf>,
}

impl Trainer {
    /// Adds a callback, called after those added before it (see [`Callback`]).
    pub fn add_callback(&mut self, callback: impl Callback + 'static) {
        self.callbacks.push(Box::new(callback));
    }

    /// [`add_callback`](Self::add_callback) for one already boxed.
    pub fn add_boxed_callback(&mut self, callback: Box<dyn Callback>) {
        self.callbacks.push(callback);
    }

    /// The device the run trains on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The host tier offloaded activations wait in (its allocator's statistics, reports and
    /// history are the tier's); none unless the run offloads.
    pub fn host_tier(&self) -> Option<&Device> {
        self.host.as_ref()
    }

    /// The model.
    pub fn model(&self) -> &dyn TrainableModel {
        &*self.model
    }

    /// The model, when it is one of the built-in ones.
    pub fn builtin_model(&self) -> Option<&TrainModel> {
        self.model.as_any().downcast_ref()
    }

    /// The task.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The run's directory.
    pub fn run_dir(&self) -> &Path {
        &self.files.dir
    }

    /// The configuration the run trains with: the one given (its run directory resolved) with
    /// the memory techniques of [`choice`](Self::choice) laid over it, as the run directory's
    /// `config.toml` and the checkpoint record it.
    pub fn config(&self) -> TrainConfig {
        self.choice.on(&self.config)
    }

    /// The memory techniques the run trains with beyond its configuration: the plan's, or on a
    /// resume those of the checkpoint's run that the configuration leaves unset.
    pub fn choice(&self) -> &Choice {
        &self.choice
    }

    /// Steps done.
    pub fn steps_done(&self) -> u64 {
        self.state.step
    }

    /// Steps the run will do in all.
    pub fn total_steps(&self) -> u64 {
        self.total_steps
    }

    /// The micro-batch size the next step starts with.
    pub fn micro_batch(&self) -> usize {
        self.state.micro.size()
    }

    /// The micro-batcher, with its history of sizes.
    pub fn micro_batcher(&self) -> &MicroBatcher {
        &self.state.micro
    }

    /// The loss scaler.
    pub fn loss_scaler(&self) -> &LossScaler {
        &self.state.scaler
    }

    /// Sets the loss scale (as `GradScaler.update(new_scale)` does): to start from a known
    /// scale, or to provoke an overflow.
    pub fn set_loss_scale(&mut self, scale: f64) {
        self.state.scaler.scale = scale;
    }

    /// The planner's table, when it ran.
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }

    /// The position of the next batch.
    pub fn next_position(&self) -> Position {
        self.state.next
    }

    /// What the run has done so far, over every process that worked on it.
    pub fn totals(&self) -> &Totals {
        &self.state.totals
    }

    /// The file this process streams its allocations to, when it does.
    pub fn trace_path(&self) -> Option<&Path> {
        self.files.trace.as_deref()
    }

    /// Runs `f` inside the trainer's thread pool, so that kernels do not hand their work to
    /// another thread for every call.
    fn in_pool<R: Send>(&mut self, f: impl FnOnce(&mut Self) -> R + Send) -> R {
        let pool = Arc::clone(&self.pool);
        pool.install(|| f(self))
    }

    /// One optimizer step on the next batch, micro-batches adapting to memory: after a run of
    /// clean steps the size grows, but only to a size the planner predicts fits.
    pub fn train_step(&mut self) -> Result<StepReport> {
        self.in_pool(|t| t.step_with(None))
    }

    /// One optimizer step on the next batch, cut into exactly these micro-batch sizes (they
    /// must add up to the batch): how a recovered step is replayed without its failures.
    pub fn train_step_with(&mut self, sizes: &[usize]) -> Result<StepReport> {
        self.in_pool(|t| t.step_with(Some(sizes)))
    }

    fn step_with(&mut self, fixed: Option<&[usize]>) -> Result<StepReport> {
        let started = Instant::now();
        let next = self.state.next;
        let part = self.launch();
        let loader = self.loader.get_or_insert_with(|| {
            Loader::sharded(
                self.task.train.clone(),
                self.config.batch.size,
                self.config.seed,
                self.config.data.prefetch,
                next,
                move |len| part.shard(len),
            )
        });
        let (position, batch) = loader
            .next_batch()
            .ok_or_else(|| Error::config("data: the loader produced no batch (no samples?)"))?;
        // A batch that could not be gathered leaves the run where it was: the next step
        // starts a loader there again.
        let batch = batch.inspect_err(|_| self.loader = None)?;
        let state = &mut self.state;
        let lr = self.schedule.at(state.step);
        self.optimizer.set_lr(lr);
        for device in std::iter::once(&self.device).chain(&self.host) {
            device.allocator().with(|a| a.reset_peak());
        }
        let sizes = match fixed {
            Some(sizes) => Sizes::Fixed(sizes),
            None => Sizes::Adaptive(&mut state.micro),
        };
        let trained = self.choice.on(&self.config);
        let mut ctx = StepContext::new(
            &self.device,
            &mut *self.model,
            &mut *self.optimizer,
            &mut state.scaler,
            &trained,
        )
        .in_world(&mut *self.world, self.control.as_mut());
        let report = train_step(&mut ctx, &batch, state.step, sizes)?;
        if fixed.is_none() {
            let clean = report.ooms.is_empty() && report.peer_ooms == 0;
            let run = (&self.config, &self.device);
            self.growth
                .finish_step(&mut state.micro, state.step, clean, run);
        }
        state.step += 1;
        state.next = position.after(report.samples, self.task.train.len());
        let seconds = started.elapsed().as_secs_f64();
        self.note(&report, position.epoch, lr, seconds);
        Ok(report)
    }

    /// Adds a step to the totals and keeps its record for [`run`](Self::run) to write down.
    fn note(&mut self, report: &StepReport, epoch: u64, lr: f64, seconds: f64) {
        let stats = self.device.allocator().stats();
        let state = &mut self.state;
        state.totals.seconds += seconds;
        state.totals.train_seconds += seconds;
        let record = StepRecord {
            step: state.step,
            epoch,
            loss: report.loss,
            lr,
            micro_sizes: report.micro_sizes.clone(),
            ooms: report.ooms.iter().map(OomRecord::from).collect(),
            skipped: report.skipped,
            grad_norm: report.grad_norm,
            loss_scale: state.scaler.scale,
            samples_per_s: report.samples as f64 / seconds.max(1e-9),
            tokens_per_s: report.scored as f64 / seconds.max(1e-9),
            in_use: stats.in_use,
            peak: stats.peak_in_use,
            limit: self.budget.limit,
            tags: tag_bytes(&stats),
            host_peak: self
                .host
                .as_ref()
                .map(|h| h.allocator().stats().peak_in_use),
            metric: None,
            elapsed_s: state.totals.seconds,
        };
        if state.totals.first_step_peak.is_none()
            && let Some(predicted) = state.predicted_peak
        {
            tracing::info!(
                "first step: measured peak {} beside the planner's {}",
                headroom_alloc::format_bytes(stats.peak_in_use),
                headroom_alloc::format_bytes(predicted)
            );
        }
        state
            .totals
            .add(&record, report.samples, stats.peak_reserved);
        self.last = Some(record);
    }

    /// The held-out metric now; none when the task holds no held-out samples.
    pub fn evaluate(&mut self) -> Result<Option<f64>> {
        self.in_pool(|t| {
            evaluate(
                &*t.model,
                &t.task,
                &t.device,
                t.config.compute_precision(),
                t.state.micro.size(),
            )
        })
    }

    /// The collective this run's ranks train over, for the next run of the same ranks
    /// ([`TrainerBuilder::world`](builder::TrainerBuilder::world)).
    pub fn into_world(self) -> Box<dyn Collective + Send> {
        self.world
    }

    /// Where this process stands among the ranks of its run ([`Launch::ALONE`] for a run of
    /// one process).
    pub fn launch(&self) -> Launch {
        Launch::of(&*self.world)
    }

    /// Writes the checkpoint of the run as it stands. Rank 0 of a data-parallel run writes it
    /// for every rank, the others nothing; where the optimizer's state is sharded, every rank
    /// must call this at the same step, as they send rank 0 their shares. Where the parameters
    /// are sharded, every rank writes its own chunks, and rank 0 commits them with the index.
    pub fn save_checkpoint(&mut self) -> Result<()> {
        if let Some(shards) = self.model.param_shards() {
            let path = checkpoint_path(&self.files.dir);
            let written = sharded_params::save_rank(
                &path,
                self.state.step,
                (self.model.module(), shards),
                &*self.optimizer,
                &mut Peers {
                    world: Some(&mut *self.world),
                    control: self.control.as_mut(),
                },
            )?;
            return match written {
                Some((index, steps)) => checkpoint::save_index(
                    &path,
                    (&index, steps),
                    &self.saved_state(),
                    &self.config(),
                ),
                None => Ok(()),
            };
        }
        let gathered = if sharded_state::is_sharded(&*self.optimizer) {
            let control = self.control.as_mut().ok_or_else(|| {
                Error::config(
                    "optimizer.shard_state: the optimizer keeps a share of the state, and this \
                     run has no other ranks to gather the rest from",
                )
            })?;
            sharded_state::gather(
                &mut *self.world,
                control,
                &*self.model,
                &mut *self.optimizer,
            )?
        } else {
            None
        };
        if !self.launch().writes() {
            return Ok(());
        }
        let optimizer = match gathered {
            Some(gathered) => gathered,
            None => HostState::of(&*self.optimizer)?,
        };
        self.write_checkpoint(self.model.module(), &optimizer)
    }

    /// Writes the checkpoint of `model`'s weights, the `optimizer` state and the run's state.
    fn write_checkpoint(&self, model: &dyn Module, optimizer: &HostState) -> Result<()> {
        checkpoint::save(
            &checkpoint_path(&self.files.dir),
            model,
            optimizer,
            &self.saved_state(),
            &self.config(),
        )
    }

    /// The run's state as a checkpoint saves it.
    fn saved_state(&self) -> TrainerState {
        TrainerState {
            dropout_calls: self.model.dropout_counter().map_or(0, |c| c.get()),
            ..self.state.clone()
        }
    }
}
