//! How a run starts: its configuration validated, its data read, its directory claimed, its
//! device opened (every allocation streamed to the run's trace), its checkpoint checked when it
//! resumes, its micro-batch size planned, its model and optimizer built. The memory techniques
//! it trains with (the plan's, or the checkpoint's on a resume) are a [`Choice`] kept beside
//! the configuration, never written into it. A run that fails to start, or is interrupted
//! before its first step, leaves its directory as it found it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use headroom_alloc::trace::TraceWriter;
use headroom_collectives::{Collective, DEFAULT_TIMEOUT, SharedWorld};
use headroom_kernels::Device;
use headroom_nn::Optimizer;

use super::{RunFiles, Trainer};
use crate::config::{DEFAULT_MARGIN, TrainConfig};
use crate::data::{Position, Task};
use crate::data_parallel::control::{self, Control};
use crate::data_parallel::world::Launch;
use crate::error::{Error, Result};
use crate::model::{BuiltinModel, ModelFactory, TrainableModel};
use crate::planning::budget::Budget;
use crate::planning::choice::Choice;
use crate::planning::micro_growth::GrowthCheck;
use crate::planning::offloads;
use crate::planning::plan::Plan;
use crate::planning::probe::Prober;
use crate::planning::rates::PlanRates;
use crate::planning::run_device;
use crate::planning::search::plan_with;
use crate::run_dir::checkpoint::{self, TrainerState, checkpoint_path};
use crate::run_dir::location::{self, Start};
use crate::run_dir::resume;
use crate::run_dir::totals::Totals;
use crate::step::diagnosis::{Failure, with_run_suggestion};
use crate::step::micro::MicroBatcher;
use crate::step::optimizer::schedule;
use crate::step::precision::LossScaler;
use crate::thread_pool::thread_pool;
use crate::trainer::callback::Callbacks;
use crate::trainer::unstarted::Unstarted;

/// What a run is started from: its configuration, how it starts, and the parts a caller may
/// give instead of those the configuration and the launcher's environment describe
/// ([`TrainerBuilder`](super::builder::TrainerBuilder) fills it).
pub(crate) struct StartParts {
    /// The run's settings, not yet validated.
    pub config: TrainConfig,
    /// New, resumed or overwriting.
    pub start: Start,
    /// The data, instead of the task `config.data` describes.
    pub task: Option<Task>,
    /// The models to train, instead of the built-in one `config.model` describes.
    pub factory: Option<Arc<dyn ModelFactory>>,
    /// The collective to train in as one of its ranks, on its device, instead of the world
    /// the launcher's environment describes and a device of the run's own.
    pub world: Option<Box<dyn Collective + Send>>,
}

/// A start's parts once checked and completed, before anything is claimed or opened.
struct Inputs {
    /// The validated configuration, as this rank trains it.
    config: TrainConfig,
    start: Start,
    task: Task,
    factory: Arc<dyn ModelFactory>,
    /// Where this process stands among the run's ranks.
    launch: Launch,
    /// The world a caller gave; taken when the device opens.
    world: Option<Box<dyn Collective + Send>>,
    /// The optimizer steps the run asks for.
    total_steps: u64,
}

/// A run's model and optimizer, and the prober that decides its growth, built alike.
struct Built {
    prober: Prober,
    model: Box<dyn TrainableModel>,
    optimizer: Box<dyn Optimizer>,
    host: Option<Device>,
}

impl Trainer {
    /// The one way a run starts (the builder's [`build`](super::builder::TrainerBuilder::build)
    /// calls it): its parts checked, its directory resolved and the run built in it. A run that
    /// fails to start leaves its directory as it found it (and one it made for itself is
    /// removed).
    pub(crate) fn start_on(parts: StartParts) -> Result<Self> {
        let unstarted = Unstarted::begin();
        let built = Inputs::check(parts).and_then(|inputs| {
            let (run_dir, made) = {
                let mut making = unstarted.making();
                let (run_dir, made) = inputs.run_dir()?;
                if made {
                    making.dir(&run_dir);
                }
                (run_dir, made)
            };
            Ok((Self::build(inputs, run_dir, &unstarted)?, made))
        });
        match built {
            Ok((trainer, made)) => {
                unstarted.keep();
                if made {
                    location::point_latest(&trainer.files.dir);
                }
                Ok(trainer)
            }
            Err(err) => {
                unstarted.remove();
                Err(err)
            }
        }
    }

    /// The run of `inputs` in `run_dir`: the directory claimed, the device opened, the
    /// checkpoint checked, the micro-batch planned, the model and optimizer built, in that
    /// order; what the start makes on disk recorded in `unstarted`.
    fn build(mut inputs: Inputs, run_dir: PathBuf, unstarted: &Unstarted) -> Result<Self> {
        let (start, launch) = (inputs.start, inputs.launch);
        if launch.writes() {
            let mut making = unstarted.making();
            if location::claim(&run_dir, start)? {
                making.dir(&run_dir);
            }
        }
        inputs.config.run_dir = Some(run_dir.clone());
        let budget = run_device::budget(&inputs.config)?;
        let (device, world, control) = inputs.open(&budget)?;
        // Removed again, with everything it holds, unless the run starts.
        let trace = StartTrace {
            path: match launch.writes() {
                true => {
                    let mut making = unstarted.making();
                    let path = stream_allocations(&inputs.config, &run_dir, &device)?;
                    if let Some(path) = &path {
                        making.file(path);
                    }
                    path
                }
                false => None,
            },
            device: &device,
        };
        let (saved, kept) = inputs.checkpoint(&run_dir, &device)?.unzip();
        let plan = inputs.plan(saved.as_ref(), &budget, &device)?;
        let choice = choice(&inputs.config, kept, plan.as_ref());
        // Sharded parameters gather through the trainer's world, called by the model too.
        let (world, shards_over) = match choice.on(&inputs.config).optimizer.shards_params() {
            true => {
                let shared = SharedWorld::new(world);
                let model = control::agreeing(&shared)?;
                (Box::new(shared) as Box<dyn Collective + Send>, Some(model))
            }
            false => (world, None),
        };
        let head_chunk = head_chunk(&inputs.config, saved.as_ref(), plan.as_ref());
        let Built {
            prober,
            model,
            optimizer,
            host,
        } = inputs.model(
            (&choice, head_chunk),
            budget,
            &device,
            saved.as_ref(),
            shards_over.as_ref(),
        )?;
        let step_limit = plan.as_ref().map_or_else(
            || budget.step_limit(inputs.config.batch.margin.unwrap_or(DEFAULT_MARGIN)),
            |p| p.step_limit,
        );
        if start != Start::Resume && launch.writes() {
            location::clear_earlier_run(&run_dir, trace.path.as_deref())?;
        }
        let state = inputs.state(saved, plan.as_ref(), head_chunk);
        let trace = trace.keep();
        let pool = thread_pool()?;
        let Inputs {
            config,
            task,
            total_steps,
            ..
        } = inputs;
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
            choice,
            budget,
            device,
            host,
            task,
            model,
            optimizer,
            total_steps,
            plan,
        })
    }
}

impl Inputs {
    /// `parts` validated, as this rank trains them, with the task and the models the
    /// configuration describes where the caller gave none, checked against each other.
    fn check(parts: StartParts) -> Result<Self> {
        let StartParts {
            mut config,
            start,
            task,
            factory,
            world,
        } = parts;
        config.apply_distributed();
        config.validate()?;
        // Saved as absolute paths, the run's configuration works from any directory.
        config.resolve_paths();
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
        Ok(Self {
            config,
            start,
            task,
            factory,
            launch,
            world,
            total_steps,
        })
    }

    /// The run's directory, and whether it was made for this run.
    fn run_dir(&self) -> Result<(PathBuf, bool)> {
        // Rank 0 writes the run's files for every rank; the others read the checkpoint they
        // resume from, and make or claim nothing.
        Ok(
            match (self.launch.writes(), &self.config.run_dir, self.start) {
                (false, Some(dir), _) => (dir.clone(), false),
                (false, None, Start::New | Start::Overwrite) => (PathBuf::new(), false),
                _ => location::resolve(self.config.run_dir.as_deref(), self.start)?,
            },
        )
    }

    /// The run's device, the world it trains in (joined on that device unless the caller gave
    /// one, whose device it then is), and the buffer its ranks agree through.
    fn open(
        &mut self,
        budget: &Budget,
    ) -> Result<(Device, Box<dyn Collective + Send>, Option<Control>)> {
        let (device, world) = match self.world.take() {
            Some(world) => (world.device().clone(), world),
            None => {
                let device = run_device::open(&self.config, budget)?;
                let world = self.launch.join(&device, DEFAULT_TIMEOUT)?;
                (device, world)
            }
        };
        let control = match self.launch.is_distributed() {
            true => Some(Control::new(&device)?),
            false => None,
        };
        Ok((device, world, control))
    }

    /// The checkpoint a resumed run continues from, read and checked, with the memory
    /// techniques it keeps of it; none for another start. A checkpoint past the run's last step
    /// is [`Error::NothingToDo`].
    fn checkpoint(
        &self,
        run_dir: &Path,
        device: &Device,
    ) -> Result<Option<(checkpoint::Saved, Choice)>> {
        if self.start != Start::Resume {
            return Ok(None);
        }
        let (saved, kept) = resumable(&self.config, run_dir, device, &self.task)?;
        if saved.state.step > self.total_steps {
            return Err(Error::NothingToDo {
                run_dir: run_dir.to_owned(),
                done: saved.state.step,
                steps: self.total_steps,
            });
        }
        Ok(Some((saved, kept)))
    }

    /// The planner's plan, unless the configuration fixes the micro-batch or the run resumes;
    /// the run trains with the memory techniques its policy chose ([`choice`]).
    fn plan(
        &self,
        saved: Option<&checkpoint::Saved>,
        budget: &Budget,
        device: &Device,
    ) -> Result<Option<Plan>> {
        if self.config.batch.micro.is_some() || saved.is_some() {
            return Ok(None);
        }
        let shard = self.launch.rank_config(&self.config);
        let plan = plan_with(
            &shard,
            &self.task,
            &self.factory,
            budget,
            device.plan_target(),
        )
        .map_err(|err| match err {
            Error::DoesNotFit { diagnosis, report } => Error::DoesNotFit {
                diagnosis: with_run_suggestion(diagnosis),
                report,
            },
            other => other,
        })?;
        Ok(Some(plan))
    }

    /// The model and its optimizer on `device` (restored from `saved` when resuming), and the
    /// prober that decides growth, both with the memory techniques of `choice` and the head's
    /// chunk `head_chunk`. An out-of-memory while building them is explained as the training
    /// state not fitting.
    fn model(
        &self,
        (choice, head_chunk): (&Choice, Option<usize>),
        budget: Budget,
        device: &Device,
        saved: Option<&checkpoint::Saved>,
        world: Option<&SharedWorld>,
    ) -> Result<Built> {
        let mut chunked = choice.on(&self.config);
        chunked.model.head_chunk = head_chunk;
        // Growth compares peaks alone: its probes' step times are priced at the fixed rates.
        let target = device.plan_target();
        let prober = Prober::new(
            &chunked,
            &self.task,
            Arc::clone(&self.factory),
            budget,
            target,
            PlanRates::fixed(target),
        );
        let host = offloads::open(&chunked, device)?;
        let offers = self.factory.knobs(&self.task.train.shape());
        if chunked.model.offloads_activations() && !offers.offload_activations {
            return Err(Error::config(
                "model.offload_activations: this model keeps no recomputed segments' inputs in a \
                 host tier",
            ));
        }
        if chunked.model.offloads_weights() && !offers.offload_weights {
            return Err(Error::config(
                "model.offload_weights: this model streams no weights from a host tier",
            ));
        }
        let parts = (&*self.factory, device, host.as_ref());
        let (model, optimizer) = build_model(&chunked, &self.task, parts, (saved, world))
            .or_else(|err| explain_if_out_of_memory(err, &prober))?;
        Ok(Built {
            prober,
            model,
            optimizer,
            host,
        })
    }

    /// Where the run stands as it starts: the checkpoint's state when resuming, a first state
    /// otherwise (at the plan's micro-batch, or the configuration's, or the whole batch); its
    /// largest micro-batch is this rank's batch, and one more process has trained it.
    fn state(
        &self,
        saved: Option<checkpoint::Saved>,
        plan: Option<&Plan>,
        head_chunk: Option<usize>,
    ) -> TrainerState {
        let config = &self.config;
        let batch = self.launch.shard_size(config.batch.size);
        let mut state = match saved {
            Some(saved) => saved.state,
            None => {
                let micro = plan.map(|p| p.micro).or(config.batch.micro);
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
                    predicted_peak: plan.map(|p| p.predicted_peak),
                    head_chunk,
                    totals: Totals::default(),
                }
            }
        };
        if state.micro.max() != batch {
            state.micro.set_max(batch);
        }
        state.totals.processes += 1;
        state
    }
}

/// The memory techniques a run of `config` trains with beyond its configuration: on a resume
/// those it `kept` of its checkpoint's run, else those of the plan's policy, else none.
fn choice(config: &TrainConfig, kept: Option<Choice>, plan: Option<&Plan>) -> Choice {
    let planned = || Some(plan?.policy.as_ref()?.chosen.choice(config));
    kept.or_else(planned).unwrap_or_default()
}

/// The fused head's chunk, as the plan chose or as the checkpoint's run did, or else as the
/// configuration sets it; the model and the probes that decide growth are built with it.
fn head_chunk(
    config: &TrainConfig,
    saved: Option<&checkpoint::Saved>,
    plan: Option<&Plan>,
) -> Option<usize> {
    match (saved, plan) {
        (Some(saved), _) => saved.state.head_chunk,
        (None, Some(plan)) => plan.head_chunk,
        (None, None) => None,
    }
    .or(config.model.head_chunk)
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
/// `config` with the memory techniques kept of it (what changed is logged; what may not change
/// is an error). Returns the checkpoint and the techniques kept.
fn resumable(
    config: &TrainConfig,
    dir: &Path,
    device: &Device,
    task: &Task,
) -> Result<(checkpoint::Saved, Choice)> {
    let path = checkpoint_path(dir);
    let saved = checkpoint::load(&path, device, task.train.len())?;
    let kept = match &saved.config {
        Some(before) => {
            // A run saved before its paths were stored absolute named them from where it
            // started, as this one reads them.
            let mut before = before.clone();
            before.resolve_paths();
            // The memory techniques the checkpoint's run trained with stay, unless set.
            let kept = Choice::kept(&before, config);
            for change in resume::changes(&before, &kept.on(config))? {
                tracing::info!("resuming with a change: {change}");
            }
            kept
        }
        None => {
            tracing::warn!(
                "{} holds no configuration: the resumed run's settings cannot be checked \
                 against it",
                path.display()
            );
            Choice::default()
        }
    };
    tracing::info!(step = saved.state.step, "resumed from {}", path.display());
    Ok((saved, kept))
}

/// The model and its optimizer on `device`, restored from `saved` when resuming, with what
/// the configuration offloads kept on `host`, its tensors sharded over `world` where the
/// configuration shards them.
fn build_model(
    config: &TrainConfig,
    task: &Task,
    (factory, device, host): (&dyn ModelFactory, &Device, Option<&Device>),
    (saved, world): (Option<&checkpoint::Saved>, Option<&SharedWorld>),
) -> Result<(Box<dyn TrainableModel>, Box<dyn Optimizer>)> {
    let (mut model, mut optimizer) = offloads::build_training_state(
        config,
        (factory, device, host),
        &task.train.shape(),
        world,
        |model| {
            // A LoRA checkpoint holds the adapters alone: the frozen base comes from where it
            // came from at the start.
            if saved.is_none() || config.model.lora.is_some() {
                factory.initialize(model)?;
            }
            // A checkpoint holds whole tensors: each is cut as it is restored into a model
            // drawn sharded, or restored before the model is cut.
            match saved.filter(|_| config.optimizer.shards_params()) {
                Some(saved) if model.param_shards().is_some() => {
                    saved.restore_weights_in_chunks(model)
                }
                Some(saved) => saved.restore_weights(model),
                None => Ok(()),
            }
        },
    )?;
    // A checkpoint's weights are restored where the model keeps them (streamed: the host).
    if let Some(saved) = saved {
        match model
            .param_shards()
            .map(|s| (s.world().rank(), s.world().world_size()))
        {
            Some(chunk) => saved.restore_state_in_chunks(&*model, &mut *optimizer, chunk)?,
            None => saved.restore(&mut *model, &mut *optimizer)?,
        }
    }
    Ok((model, optimizer))
}

/// An out-of-memory while building the model is the limit being too small for the training
/// state: the planner's diagnosis, instead of the allocator's report alone.
fn explain_if_out_of_memory<T>(err: Error, prober: &Prober) -> Result<T> {
    match err.oom_report() {
        Some(report) => Err(Error::DoesNotFit {
            diagnosis: with_run_suggestion(prober.explain(report, Failure::TrainingState)?),
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
