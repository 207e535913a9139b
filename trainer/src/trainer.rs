//! The trainer: builds the run a configuration describes (claiming its directory, planning its
//! micro-batch size on the meta device, or restoring its checkpoint), then trains it step by
//! step. [`run`](Trainer::run), in `trainer/run.rs`, adds what a whole run does around the
//! steps: evaluation, metrics, checkpoints and the artifacts.

mod run;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use headroom_alloc::trace::TraceWriter;
use headroom_kernels::Device;
use headroom_nn::{LrSchedule, Optimizer};

use crate::config::{DEFAULT_MARGIN, TrainConfig, validate::Budget};
use crate::data::{Loader, Position, Task};
use crate::device;
use crate::diagnosis::Failure;
use crate::error::{Error, Result};
use crate::eval::evaluate;
use crate::micro::MicroBatcher;
use crate::model::TrainModel;
use crate::optim::{build_optimizer, schedule};
use crate::planner::{Plan, plan, target_bytes};
use crate::precision::LossScaler;
use crate::probe::Prober;
use crate::record::{OomRecord, StepRecord, tag_bytes};
use crate::resume;
use crate::run_dir::{self, Start};
use crate::state::{self, TrainerState, checkpoint_path};
use crate::step::{Sizes, StepContext, StepReport, train_step};
use crate::totals::Totals;

/// A run: its model, optimizer, data and memory, and where it stands.
pub struct Trainer {
    config: TrainConfig,
    run_dir: PathBuf,
    /// The step of the checkpoint this process resumed from.
    resumed_from: Option<u64>,
    budget: Budget,
    device: Device,
    task: Task,
    model: TrainModel,
    optimizer: Box<dyn Optimizer>,
    schedule: LrSchedule,
    total_steps: u64,
    micro: MicroBatcher,
    scaler: LossScaler,
    step: u64,
    next: Position,
    loader: Option<Loader>,
    plan: Option<Plan>,
    predicted_peak: Option<u64>,
    /// Asked before the micro-batch grows: does the larger size fit `growth_target`?
    growth: Prober,
    growth_target: u64,
    /// The memory of the device that other processes do not hold (its free memory and what
    /// this run has reserved), when last looked at; none on the CPU. When it changes, sizes that
    /// failed may fit again.
    available: Option<u64>,
    pool: Arc<rayon::ThreadPool>,
    totals: Totals,
    /// The last step's record, until [`run`](Self::run) writes it down.
    last: Option<StepRecord>,
    /// The file this process streams its allocations to.
    trace: Option<PathBuf>,
    /// The held-out metric at the end of the run.
    metric: Option<f64>,
}

impl Trainer {
    /// A new run of `config`: validated, its data read, its micro-batch size planned (unless
    /// the configuration fixes it), its model and optimizer built. Its run directory must not
    /// hold a checkpoint (see [`overwrite`](Self::overwrite)).
    pub fn new(config: TrainConfig) -> Result<Self> {
        Self::start(config, Start::New, None)
    }

    /// The run of `config` continued from the checkpoint in its run directory (without one,
    /// the newest run in `runs/`). The checkpoint's run must have had the same seed, model,
    /// data, optimizer and precision; what may change is logged.
    pub fn resume(config: TrainConfig) -> Result<Self> {
        Self::start(config, Start::Resume, None)
    }

    /// A new run of `config` that replaces the run in its directory, checkpoint included.
    pub fn overwrite(config: TrainConfig) -> Result<Self> {
        Self::start(config, Start::Overwrite, None)
    }

    /// A new run of `config` on a task of the caller's (its own datasets and metric) instead
    /// of the one `config.data` describes.
    pub fn with_task(config: TrainConfig, task: Task) -> Result<Self> {
        Self::start(config, Start::New, Some(task))
    }

    /// A run of `config` that starts as `start`, on `task` or the one `config.data` describes.
    /// A run that fails to start leaves its directory as it found it (and one it made for
    /// itself is removed).
    pub fn start(config: TrainConfig, start: Start, task: Option<Task>) -> Result<Self> {
        config.validate()?;
        let task = match task {
            Some(task) => task,
            None => Task::from_config(&config.data, config.seed)?,
        };
        let total_steps = total_steps(&config, task.train.len())?;
        let (run_dir, made) = run_dir::resolve(config.run_dir.as_deref(), start)?;
        let built = Self::build(config, task, start, run_dir.clone(), total_steps);
        match (&built, made) {
            (Ok(_), true) => run_dir::point_latest(&run_dir),
            (Err(_), true) => {
                std::fs::remove_dir_all(&run_dir).ok();
            }
            _ => {}
        }
        built
    }

    fn build(
        mut config: TrainConfig,
        task: Task,
        start: Start,
        run_dir: PathBuf,
        total_steps: u64,
    ) -> Result<Self> {
        run_dir::claim(&run_dir, start)?;
        config.run_dir = Some(run_dir.clone());
        let budget = device::budget(&config)?;
        let device = device::open(&config, &budget)?;
        let trace = stream_allocations(&config, &run_dir, &device)?;
        let saved = match start {
            Start::Resume => Some(resumable(&config, &run_dir, &device, &task)?),
            _ => None,
        };
        let plan = match (config.batch.micro, &saved) {
            (None, None) => Some(plan(&config, &task, &budget, device.plan_target())?),
            _ => None,
        };
        let prober = Prober::new(&config, &task, budget, device.plan_target());
        let (model, optimizer) = build_model(&config, &task, &device, saved.as_ref())
            .or_else(|err| explain_if_out_of_memory(err, &prober))?;
        if start != Start::Resume {
            run_dir::clear_earlier_run(&run_dir, trace.as_deref())?;
        }
        let batch = config.batch.size;
        let mut state = match saved {
            Some(saved) => saved.state,
            None => {
                let micro = plan.as_ref().map(|p| p.micro).or(config.batch.micro);
                TrainerState {
                    step: 0,
                    next: Position::default(),
                    micro: MicroBatcher::new(
                        micro.unwrap_or(batch),
                        batch,
                        config.batch.grow_after,
                    ),
                    scaler: LossScaler::new(&config.precision),
                    dropout_calls: 0,
                    predicted_peak: plan.as_ref().map(|p| p.predicted_peak),
                    totals: Totals::default(),
                }
            }
        };
        if state.micro.max() != batch {
            state.micro.set_max(batch);
        }
        state.totals.processes += 1;
        let growth_target = plan.as_ref().map_or_else(
            || target_bytes(budget.limit, config.batch.margin.unwrap_or(DEFAULT_MARGIN)),
            |p| p.target,
        );
        let pool = rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("headroom-{i}"))
            .build()
            .map_err(|e| Error::io("the thread pool")(std::io::Error::other(e)))?;
        Ok(Self {
            schedule: schedule(&config.optimizer, total_steps),
            resumed_from: (start == Start::Resume).then_some(state.step),
            micro: state.micro,
            scaler: state.scaler,
            predicted_peak: state.predicted_peak,
            step: state.step,
            next: state.next,
            totals: state.totals,
            loader: None,
            growth: prober,
            growth_target,
            available: None,
            pool: Arc::new(pool),
            last: None,
            metric: None,
            config,
            run_dir,
            budget,
            device,
            task,
            model,
            optimizer,
            total_steps,
            plan,
            trace,
        })
    }

    /// The device the run trains on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The model.
    pub fn model(&self) -> &TrainModel {
        &self.model
    }

    /// The task.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The run's directory.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The configuration, its run directory resolved.
    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// Steps done.
    pub fn steps_done(&self) -> u64 {
        self.step
    }

    /// Steps the run will do in all.
    pub fn total_steps(&self) -> u64 {
        self.total_steps
    }

    /// The micro-batch size the next step starts with.
    pub fn micro_batch(&self) -> usize {
        self.micro.size()
    }

    /// The micro-batcher, with its history of sizes.
    pub fn micro_batcher(&self) -> &MicroBatcher {
        &self.micro
    }

    /// The loss scaler.
    pub fn loss_scaler(&self) -> &LossScaler {
        &self.scaler
    }

    /// Sets the loss scale (as `GradScaler.update(new_scale)` does): to start from a known
    /// scale, or to provoke an overflow.
    pub fn set_loss_scale(&mut self, scale: f64) {
        self.scaler.scale = scale;
    }

    /// The planner's table, when it ran.
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }

    /// The position of the next batch.
    pub fn next_position(&self) -> Position {
        self.next
    }

    /// What the run has done so far, over every process that worked on it.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    /// The file this process streams its allocations to, when it does.
    pub fn trace_path(&self) -> Option<&Path> {
        self.trace.as_deref()
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
        let next = self.next;
        let loader = self.loader.get_or_insert_with(|| {
            Loader::new(
                self.task.train.clone(),
                self.config.batch.size,
                self.config.seed,
                self.config.data.prefetch,
                next,
            )
        });
        let (position, batch) = loader
            .next_batch()
            .ok_or_else(|| Error::config("data: the loader produced no batch (no samples?)"))?;
        let lr = self.schedule.at(self.step);
        self.optimizer.set_lr(lr);
        self.device.allocator().with(|a| a.reset_peak());
        let sizes = match fixed {
            Some(sizes) => Sizes::Fixed(sizes),
            None => Sizes::Adaptive(&mut self.micro),
        };
        let mut ctx = StepContext {
            device: &self.device,
            model: &mut self.model,
            optimizer: &mut *self.optimizer,
            scaler: &mut self.scaler,
            precision: self.config.precision.dtype,
            clip: self.config.optimizer.clip,
        };
        let report = train_step(&mut ctx, &batch, self.step, sizes)?;
        if fixed.is_none() {
            let reserved = self.device.allocator().stats().reserved;
            let available = device::free_memory(&self.config).map(|free| free + reserved);
            if available != self.available {
                self.available = available;
                self.micro.forget_ceiling();
            }
            let (prober, target) = (&mut self.growth, self.growth_target);
            let mut fits = |size: usize| {
                prober.fits(size, target).unwrap_or_else(|err| {
                    tracing::warn!("no growth to micro-batches of {size}: {err}");
                    false
                })
            };
            self.micro
                .finished(self.step, report.ooms.is_empty(), &mut fits);
        }
        self.step += 1;
        self.next = position.after(batch.len(), self.task.train.len());
        let seconds = started.elapsed().as_secs_f64();
        self.note(&report, position.epoch, lr, seconds);
        Ok(report)
    }

    /// Adds a step to the totals and keeps its record for [`run`](Self::run) to write down.
    fn note(&mut self, report: &StepReport, epoch: u64, lr: f64, seconds: f64) {
        let stats = self.device.allocator().stats();
        self.totals.seconds += seconds;
        let record = StepRecord {
            step: self.step,
            epoch,
            loss: report.loss,
            lr,
            micro_sizes: report.micro_sizes.clone(),
            ooms: report.ooms.iter().map(OomRecord::from).collect(),
            skipped: report.skipped,
            grad_norm: report.grad_norm,
            loss_scale: self.scaler.scale,
            samples_per_s: report.samples as f64 / seconds.max(1e-9),
            tokens_per_s: report.scored as f64 / seconds.max(1e-9),
            in_use: stats.in_use,
            peak: stats.peak_in_use,
            limit: self.budget.limit,
            tags: tag_bytes(&stats),
            metric: None,
            elapsed_s: self.totals.seconds,
        };
        if self.totals.first_step_peak.is_none()
            && let Some(predicted) = self.predicted_peak
        {
            tracing::info!(
                "first step: measured peak {} beside the planner's {}",
                headroom_alloc::format_bytes(stats.peak_in_use),
                headroom_alloc::format_bytes(predicted)
            );
        }
        self.totals.add(&record, stats.peak_reserved);
        self.last = Some(record);
    }

    /// The held-out metric now; none when the task holds no held-out samples.
    pub fn evaluate(&mut self) -> Result<Option<f64>> {
        self.in_pool(|t| {
            evaluate(
                &t.model,
                &t.task,
                &t.device,
                t.config.precision.dtype,
                t.micro.size(),
            )
        })
    }

    /// Writes the checkpoint of the run as it stands.
    pub fn save_checkpoint(&self) -> Result<()> {
        let state = TrainerState {
            step: self.step,
            next: self.next,
            micro: self.micro.clone(),
            scaler: self.scaler.clone(),
            dropout_calls: self.model.dropout_counter().map_or(0, |c| c.get()),
            predicted_peak: self.predicted_peak,
            totals: self.totals.clone(),
        };
        state::save(
            &checkpoint_path(&self.run_dir),
            &self.model,
            &*self.optimizer,
            &state,
            &self.config,
        )
    }
}

/// Streams the device's allocations to the next trace file of `dir`, when the configuration
/// asks for it; returns that file.
fn stream_allocations(
    config: &TrainConfig,
    dir: &Path,
    device: &Device,
) -> Result<Option<PathBuf>> {
    if !config.memory.trace {
        return Ok(None);
    }
    let path = run_dir::next_trace(dir)?;
    let file = std::fs::File::create(&path).map_err(Error::io(&path))?;
    device
        .allocator()
        .with(|a| a.stream_trace(Some(TraceWriter::new(file))));
    Ok(Some(path))
}

/// The checkpoint in `dir`, read and checked: its state, and its run's configuration against
/// `config` (what changed is logged; what may not change is an error).
fn resumable(
    config: &TrainConfig,
    dir: &Path,
    device: &Device,
    task: &Task,
) -> Result<state::Saved> {
    let path = checkpoint_path(dir);
    let saved = state::load(&path, device, task.train.len())?;
    match &saved.config {
        Some(before) => {
            for change in resume::changes(before, config)? {
                tracing::info!("resuming with a change: {change}");
            }
        }
        None => tracing::warn!(
            "{} holds no configuration: the resumed run's settings cannot be checked against it",
            path.display()
        ),
    }
    tracing::info!(step = saved.state.step, "resumed from {}", path.display());
    Ok(saved)
}

/// The model and its optimizer on `device`, restored from `saved` when resuming.
fn build_model(
    config: &TrainConfig,
    task: &Task,
    device: &Device,
    saved: Option<&state::Saved>,
) -> Result<(TrainModel, Box<dyn Optimizer>)> {
    let mut model = TrainModel::build(&config.model, task.train.shape(), device, config.seed)?;
    let mut optimizer = build_optimizer(&config.optimizer, model.module())?;
    if let Some(saved) = saved {
        saved.restore(&mut model, &mut *optimizer)?;
    }
    Ok((model, optimizer))
}

/// An out-of-memory while building the model is the limit being too small for the training
/// state: the planner's diagnosis, instead of the allocator's report alone.
fn explain_if_out_of_memory<T>(err: Error, prober: &Prober) -> Result<T> {
    match err.oom_report() {
        Some(report) => Err(Error::DoesNotFit {
            diagnosis: prober.explain(report, Failure::TrainingState)?,
            report: Box::new(report.clone()),
        }),
        None => Err(err),
    }
}

/// The steps `config` asks for, over a training set of `samples`.
fn total_steps(config: &TrainConfig, samples: usize) -> Result<u64> {
    let batches_per_epoch = samples.div_ceil(config.batch.size.max(1)) as u64;
    match (config.steps, config.epochs) {
        (Some(steps), _) => Ok(steps),
        (None, Some(epochs)) => epochs.checked_mul(batches_per_epoch).ok_or_else(|| {
            Error::config(format!(
                "epochs: {epochs} epochs of {batches_per_epoch} batches are more steps than a \
                 run can count"
            ))
        }),
        (None, None) => Ok(crate::config::DEFAULT_STEPS),
    }
}
