//! How a run starts: its configuration validated, its data read, its directory claimed, its
//! device opened (every allocation streamed to the run's trace), its checkpoint checked when it
//! resumes, its micro-batch size planned, its model and optimizer built. A run that fails to
//! start leaves its directory as it found it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use headroom_alloc::trace::TraceWriter;
use headroom_collectives::{Collective, DEFAULT_TIMEOUT};
use headroom_kernels::Device;
use headroom_nn::Optimizer;

use super::{RunFiles, Trainer};
use crate::config::{DEFAULT_MARGIN, TrainConfig};
use crate::data::{Position, Task};
use crate::data_parallel::control::Control;
use crate::data_parallel::world::Launch;
use crate::error::{Error, Result};
use crate::model::{BuiltinModel, ModelFactory, ModelSettings, TrainableModel};
use crate::planning::diagnosis::Failure;
use crate::planning::probe::Prober;
use crate::planning::run_device;
use crate::planning::search::plan_with;
use crate::run_dir::checkpoint::{self, TrainerState, checkpoint_path};
use crate::run_dir::location::{self, Start};
use crate::run_dir::resume;
use crate::run_dir::totals::Totals;
use crate::step::micro::MicroBatcher;
use crate::step::micro_growth::GrowthCheck;
use crate::step::optimizer::{build_optimizer, schedule};
use crate::step::precision::LossScaler;
use crate::trainer::callback::Callbacks;

impl Trainer {
    /// A new run of `config`: validated, its data read, its micro-batch size planned (unless
    /// the configuration fixes it), its model and optimizer built. Its run directory must not
    /// hold a checkpoint (see [`overwrite`](Self::overwrite)).
    pub fn new(config: TrainConfig) -> Result<Self> {
        Self::start(config, Start::New, None)
    }

    /// The run of `config` continued from the checkpoint in its run directory (without one,
    /// the newest run in `runs/`). The checkpoint's run must have had the same seed, model,
    /// data, optimizer and precision; what may change is logged. Asked for fewer steps than the
    /// checkpoint has done, it is [`Error::NothingToDo`] and changes nothing.
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

    /// A new run of a model of the caller's: `factory` builds it (on the run's device, and on
    /// the planner's meta devices), on `task`'s data; `config.model` is not read but for the
    /// memory techniques the policy and the planner choose. Everything else (the planner,
    /// adaptive micro-batching, recovery, mixed precision, checkpoints) works as for the
    /// built-in models.
    pub fn with_model(
        config: TrainConfig,
        task: Task,
        factory: impl ModelFactory + 'static,
    ) -> Result<Self> {
        Self::start_with(config, Start::New, Some(task), Some(Arc::new(factory)))
    }

    /// A run of `config` that starts as `start`, on `task` or the one `config.data` describes.
    /// A run that fails to start leaves its directory as it found it (and one it made for
    /// itself is removed).
    pub fn start(config: TrainConfig, start: Start, task: Option<Task>) -> Result<Self> {
        Self::start_with(config, start, task, None)
    }

    /// [`start`](Self::start) with the models `factory` builds instead of the built-in one
    /// `config.model` describes (none: that one).
    pub fn start_with(
        config: TrainConfig,
        start: Start,
        task: Option<Task>,
        factory: Option<Arc<dyn ModelFactory>>,
    ) -> Result<Self> {
        Self::start_on(config, start, task, factory, None)
    }

    /// [`start_with`](Self::start_with) as a rank of `world`, on its device, instead of the
    /// world the launcher's environment describes and a device of the run's own: a program
    /// that joined its collective once trains several runs in turn, each handing the world on
    /// ([`into_world`](Self::into_world)).
    pub fn start_in_world(
        config: TrainConfig,
        start: Start,
        task: Option<Task>,
        factory: Option<Arc<dyn ModelFactory>>,
        world: Box<dyn Collective + Send>,
    ) -> Result<Self> {
        Self::start_on(config, start, task, factory, Some(world))
    }

    fn start_on(
        config: TrainConfig,
        start: Start,
        task: Option<Task>,
        factory: Option<Arc<dyn ModelFactory>>,
        world: Option<Box<dyn Collective + Send>>,
    ) -> Result<Self> {
        config.validate()?;
        let launch = world
            .as_deref()
            .map_or_else(Launch::from_env, |world| Launch::of(world));
        let config = launch.prepare(config)?;
        let task = match task {
            Some(task) => task,
            None => Task::from_config(&config.data, &config.model, config.seed)?,
        };
        let factory: Arc<dyn ModelFactory> = match factory {
            Some(factory) => factory,
            None => Arc::new(BuiltinModel(config.model.clone())),
        };
        factory.check(&task.train.shape())?;
        let total_steps = total_steps(&config, task.train.len())?;
        // Rank 0 writes the run's files for every rank; the others read the checkpoint they
        // resume from, and make or claim nothing.
        let (run_dir, made) = match (launch.writes(), &config.run_dir, start) {
            (false, Some(dir), _) => (dir.clone(), false),
            (false, None, Start::New | Start::Overwrite) => (PathBuf::new(), false),
            _ => location::resolve(config.run_dir.as_deref(), start)?,
        };
        let built = Self::build(
            config,
            task,
            factory,
            start,
            run_dir.clone(),
            total_steps,
            (launch, world),
        );
        match (&built, made) {
            (Ok(_), true) => location::point_latest(&run_dir),
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
        factory: Arc<dyn ModelFactory>,
        start: Start,
        run_dir: PathBuf,
        total_steps: u64,
        (launch, world): (Launch, Option<Box<dyn Collective + Send>>),
    ) -> Result<Self> {
        if launch.writes() {
            location::claim(&run_dir, start)?;
        }
        config.run_dir = Some(run_dir.clone());
        let budget = run_device::budget(&config)?;
        let (device, world) = match world {
            Some(world) => (world.device().clone(), world),
            None => {
                let device = run_device::open(&config, &budget)?;
                let world = launch.join(&device, DEFAULT_TIMEOUT)?;
                (device, world)
            }
        };
        let control = match launch.is_distributed() {
            true => Some(Control::new(&device)?),
            false => None,
        };
        // Removed again, with everything it holds, unless the run starts.
        let trace = StartTrace {
            path: match launch.writes() {
                true => stream_allocations(&config, &run_dir, &device)?,
                false => None,
            },
            device: &device,
        };
        let saved = match start {
            Start::Resume => Some(resumable(&mut config, &run_dir, &device, &task)?),
            _ => None,
        };
        if let Some(saved) = &saved
            && saved.state.step > total_steps
        {
            return Err(Error::NothingToDo {
                run_dir,
                done: saved.state.step,
                steps: total_steps,
            });
        }
        let plan = match (config.batch.micro, &saved) {
            (None, None) => {
                let target = device.plan_target();
                let shard = launch.rank_config(&config);
                Some(plan_with(&shard, &task, &factory, &budget, target)?)
            }
            _ => None,
        };
        // The run trains with the memory techniques the policy chose, and its configuration
        // says which.
        if let Some(policy) = plan.as_ref().and_then(|p| p.policy.as_ref()) {
            policy.chosen.apply(&mut config);
        }
        // The fused head chunks as the plan chose, or as the checkpoint's run did; the model
        // and the probes that decide growth are built with that chunk.
        let head_chunk = match (&saved, &plan) {
            (Some(saved), _) => saved.state.head_chunk,
            (None, Some(plan)) => plan.head_chunk,
            (None, None) => None,
        }
        .or(config.model.head_chunk);
        let chunked = {
            let mut chunked = config.clone();
            chunked.model.head_chunk = head_chunk;
            chunked
        };
        // Growth compares peaks alone: its probes' step times are priced at the fixed rates.
        let target = device.plan_target();
        let prober = Prober::new(
            &chunked,
            &task,
            Arc::clone(&factory),
            budget,
            target,
            target.rates(),
        );
        let (model, optimizer) = build_model(&chunked, &task, &*factory, &device, saved.as_ref())
            .or_else(|err| explain_if_out_of_memory(err, &prober))?;
        let step_limit = plan.as_ref().map_or_else(
            || budget.step_limit(config.batch.margin.unwrap_or(DEFAULT_MARGIN)),
            |p| p.step_limit,
        );
        if start != Start::Resume && launch.writes() {
            location::clear_earlier_run(&run_dir, trace.path.as_deref())?;
        }
        let batch = launch.shard_size(config.batch.size);
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
                    head_chunk,
                    totals: Totals::default(),
                }
            }
        };
        if state.micro.max() != batch {
            state.micro.set_max(batch);
        }
        state.totals.processes += 1;
        let trace = trace.keep();
        let pool = rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("headroom-{i}"))
            .build()
            .map_err(|e| Error::io("the thread pool")(std::io::Error::other(e)))?;
        Ok(Self {
            schedule: schedule(&config.optimizer, total_steps),
            files: RunFiles {
                dir: run_dir,
                resumed_from: (start == Start::Resume).then_some(state.step),
                trace,
            },
            world,
            control,
            state,
            loader: None,
            growth: GrowthCheck::new(prober, step_limit),
            pool: Arc::new(pool),
            last: None,
            callbacks: Callbacks::default(),
            stopped_at: None,
            config,
            budget,
            device,
            task,
            model,
            optimizer,
            total_steps,
            plan,
        })
    }
}

/// The allocation trace of a start that has not yet been accepted: unless
/// [`keep`](StartTrace::keep) is called, dropping it stops the streaming and removes the file,
/// so that a refused start leaves no trace behind.
struct StartTrace<'a> {
    /// The trace file, if the run streams one.
    path: Option<PathBuf>,
    /// The device whose allocator streams to it.
    device: &'a Device,
}

impl StartTrace<'_> {
    /// The run has started: its trace stays.
    fn keep(mut self) -> Option<PathBuf> {
        self.path.take()
    }
}

impl Drop for StartTrace<'_> {
    fn drop(&mut self) {
        let Some(path) = self.path.take() else {
            return;
        };
        if let Some(writer) = self.device.allocator().with(|a| a.stream_trace(None)) {
            // The file goes: what it could not write no longer matters.
            drop(writer.finish());
        }
        if let Err(err) = std::fs::remove_file(&path) {
            tracing::warn!("{}: cannot remove it ({err})", path.display());
        }
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
    let path = location::next_trace(dir)?;
    let file = std::fs::File::create(&path).map_err(Error::io(&path))?;
    device
        .allocator()
        .with(|a| a.stream_trace(Some(TraceWriter::new(file))));
    Ok(Some(path))
}

/// The checkpoint in `dir`, read and checked: its state, and its run's configuration against
/// `config` (what changed is logged; what may not change is an error).
fn resumable(
    config: &mut TrainConfig,
    dir: &Path,
    device: &Device,
    task: &Task,
) -> Result<checkpoint::Saved> {
    let path = checkpoint_path(dir);
    let saved = checkpoint::load(&path, device, task.train.len())?;
    match &saved.config {
        Some(before) => {
            // The memory techniques the checkpoint's run trained with stay, unless set.
            crate::planning::policy::keep_unset(before, config);
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
    factory: &dyn ModelFactory,
    device: &Device,
    saved: Option<&checkpoint::Saved>,
) -> Result<(Box<dyn TrainableModel>, Box<dyn Optimizer>)> {
    let settings = ModelSettings::of(config);
    let mut model = factory.build(device, &task.train.shape(), &settings)?;
    if saved.is_none() {
        factory.initialize(&mut *model)?;
    }
    let mut optimizer = build_optimizer(&config.optimizer, model.module())?;
    if let Some(saved) = saved {
        saved.restore(&mut *model, &mut *optimizer)?;
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
