//! A run put together from Rust, without a configuration file: [`Trainer::builder`]. Each
//! setting writes the field of [`TrainConfig`] that a file or a flag would, so `build` checks
//! them with the same validation and the same typed errors; what is not set keeps the file's
//! default.

use std::path::PathBuf;
use std::sync::Arc;

use headroom_collectives::Collective;

use crate::config::{PrecisionKind, Recompute, TrainConfig};
use crate::data::{Dataset, Metric, Task};
use crate::error::Result;
use crate::model::ModelFactory;
use crate::run_dir::Start;
use crate::trainer::callback::Callback;
use crate::trainer::{StartParts, Trainer};

/// Settings of a run, one call each, then [`build`](Self::build).
///
/// ```
/// use headroom_trainer::Trainer;
/// let dir = std::env::temp_dir().join("headroom-builder-doc");
/// // The built-in GPT on the addition task, in batches of 32 under a 12 MiB limit.
/// let mut trainer = Trainer::builder()
///     .batch(32)
///     .steps(2)
///     .memory_limit("12MiB".parse()?)
///     .run_dir(&dir)
///     .overwrite()
///     .build()?;
/// assert_eq!(trainer.run(false)?.steps, 2);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), headroom_trainer::Error>(())
/// ```
#[must_use = "a builder does nothing until built"]
pub struct TrainerBuilder {
    config: TrainConfig,
    task: Option<Task>,
    factory: Option<Arc<dyn ModelFactory>>,
    callbacks: Vec<Box<dyn Callback>>,
    start: Start,
    world: Option<Box<dyn Collective + Send>>,
}

impl Trainer {
    /// A run with every setting at its default (the built-in GPT on the addition task), to
    /// change one call at a time.
    pub fn builder() -> TrainerBuilder {
        TrainerBuilder {
            config: TrainConfig::default(),
            task: None,
            factory: None,
            callbacks: Vec::new(),
            start: Start::New,
            world: None,
        }
    }

    /// A new run of `config`: `Trainer::builder().config(config).build()`, the way a run
    /// read from a file starts. Its run directory must not hold a checkpoint (see
    /// [`TrainerBuilder::resume`] and [`TrainerBuilder::overwrite`]).
    pub fn new(config: TrainConfig) -> Result<Self> {
        Self::builder().config(config).build()
    }
}

impl TrainerBuilder {
    /// Starts from `config` (read from a file, say) instead of the defaults.
    pub fn config(mut self, config: TrainConfig) -> Self {
        self.config = config;
        self
    }

    /// Trains the models `factory` builds (on the run's device, and on the planner's meta
    /// devices) instead of the built-in one: `config.model` is not read but for the memory
    /// techniques the policy and the planner choose. Everything else (the planner, adaptive
    /// micro-batching, recovery, mixed precision, checkpoints) works as for the built-in
    /// models.
    pub fn model(mut self, factory: impl ModelFactory + 'static) -> Self {
        self.factory = Some(Arc::new(factory));
        self
    }

    /// Trains on `train` and judges on `eval` by `metric`, instead of the data the
    /// configuration describes.
    pub fn data(
        self,
        train: impl Dataset + 'static,
        eval: impl Dataset + 'static,
        metric: Metric,
    ) -> Self {
        self.task(Task {
            train: Arc::new(train),
            eval: Arc::new(eval),
            metric,
        })
    }

    /// Trains on `task` (its own datasets and metric) instead of the one the configuration's
    /// `data` describes.
    pub fn task(mut self, task: Task) -> Self {
        self.task = Some(task);
        self
    }

    /// Samples per optimizer step (the effective batch).
    pub fn batch(mut self, size: usize) -> Self {
        self.config.batch.size = size;
        self
    }

    /// The first micro-batch size, instead of the planner's.
    pub fn micro_batch(mut self, size: usize) -> Self {
        self.config.batch.micro = Some(size);
        self
    }

    /// Optimizer steps to run.
    pub fn steps(mut self, steps: u64) -> Self {
        self.config.steps = Some(steps);
        self.config.epochs = None;
        self
    }

    /// Epochs to run, instead of steps.
    pub fn epochs(mut self, epochs: u64) -> Self {
        self.config.epochs = Some(epochs);
        self.config.steps = None;
        self
    }

    /// The peak learning rate.
    pub fn lr(mut self, lr: f64) -> Self {
        self.config.optimizer.lr = lr;
        self
    }

    /// The precision of the products (autocast): f32, bf16 or f16.
    pub fn precision(mut self, precision: PrecisionKind) -> Self {
        self.config.precision.dtype = precision;
        self
    }

    /// The most memory the run may use, such as `"2GiB".parse()?`.
    pub fn memory_limit(mut self, limit: headroom_alloc::ByteSize) -> Self {
        self.config.memory.limit = Some(limit);
        self.config.memory.fraction = None;
        self
    }

    /// What to compute again in the backward pass, instead of the memory policy's choice
    /// (among what the model offers).
    pub fn recompute(mut self, recompute: Recompute) -> Self {
        self.config.model.recompute = Some(recompute);
        self
    }

    /// The device: `cpu`, `cuda` or `cuda:N`.
    pub fn device(mut self, device: &str) -> Self {
        self.config.device = device.to_owned();
        self
    }

    /// Seeds the weights, the data order and dropout.
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = seed;
        self
    }

    /// The run's directory.
    pub fn run_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.run_dir = Some(dir.into());
        self
    }

    /// Evaluates the held-out metric every this many steps (0: at the end only).
    pub fn eval_every(mut self, steps: u64) -> Self {
        self.config.eval_every = steps;
        self
    }

    /// Writes a checkpoint every this many steps (0: at the end only).
    pub fn checkpoint_every(mut self, steps: u64) -> Self {
        self.config.checkpoint.every = steps;
        self
    }

    /// Runs `callback` around the loop (after those added before it).
    pub fn callback(mut self, callback: impl Callback + 'static) -> Self {
        self.callbacks.push(Box::new(callback));
        self
    }

    /// Continues the run in the run directory from its checkpoint (without a run directory,
    /// the newest run in `runs/`). The checkpoint's run must have had the same seed, model,
    /// data, optimizer and precision; what may change is logged. Asked for fewer steps than the
    /// checkpoint has done, [`build`](Self::build) is
    /// [`Error::NothingToDo`](crate::error::Error::NothingToDo) and changes nothing.
    pub fn resume(self) -> Self {
        self.start(Start::Resume)
    }

    /// Replaces a run the run directory holds, checkpoint included.
    pub fn overwrite(self) -> Self {
        self.start(Start::Overwrite)
    }

    /// Starts as `start`: a new run (the default), one resumed ([`resume`](Self::resume)) or
    /// one that replaces the run in its directory ([`overwrite`](Self::overwrite)).
    pub fn start(mut self, start: Start) -> Self {
        self.start = start;
        self
    }

    /// Trains as a rank of `world`, on its device, instead of the world the launcher's
    /// environment describes and a device of the run's own: a program that joined its
    /// collective once trains several runs in turn, each handing the world on
    /// ([`Trainer::into_world`]).
    pub fn world(mut self, world: Box<dyn Collective + Send>) -> Self {
        self.world = Some(world);
        self
    }

    /// The configuration the settings make, as `build` will check it.
    pub fn to_config(&self) -> &TrainConfig {
        &self.config
    }

    /// Checks the settings as a configuration file's and starts the run: its data read, its
    /// micro-batch planned (unless the configuration fixes it), its model and optimizer built.
    /// A run that fails to start leaves its directory as it found it (and one it made for
    /// itself is removed).
    pub fn build(self) -> Result<Trainer> {
        let mut trainer = Trainer::start_on(StartParts {
            config: self.config,
            start: self.start,
            task: self.task,
            factory: self.factory,
            world: self.world,
        })?;
        for callback in self.callbacks {
            trainer.add_boxed_callback(callback);
        }
        Ok(trainer)
    }
}
