//! The trainer: builds the run a configuration describes (planning its micro-batch size on the
//! meta device), then trains it step by step, evaluating, checkpointing and writing down what
//! happened.

use std::sync::Arc;
use std::time::Instant;

use headroom_kernels::Device;
use headroom_nn::{LrSchedule, Optimizer};
use indicatif::{ProgressBar, ProgressStyle};

use crate::config::{TrainConfig, validate::Budget};
use crate::data::{Loader, Position, Task};
use crate::device;
use crate::error::{Error, Result};
use crate::eval::evaluate;
use crate::micro::MicroBatcher;
use crate::model::TrainModel;
use crate::optim::{build_optimizer, schedule};
use crate::planner::{Plan, plan};
use crate::precision::LossScaler;
use crate::record::{StepRecord, Summary, TagBytes, append, read_all, tag_bytes};
use crate::state::{TrainerState, checkpoint_path, restore, save};
use crate::step::{Sizes, StepContext, StepReport, train_step};

/// A run: its model, optimizer, data and memory, and where it stands.
pub struct Trainer {
    config: TrainConfig,
    budget: Budget,
    device: Device,
    task: Task,
    model: TrainModel,
    optimizer: Box<dyn Optimizer>,
    schedule: LrSchedule,
    total_steps: u64,
    batches_per_epoch: u64,
    micro: MicroBatcher,
    scaler: LossScaler,
    step: u64,
    next: Position,
    loader: Option<Loader>,
    plan: Option<Plan>,
    predicted_peak: Option<u64>,
    pool: Arc<rayon::ThreadPool>,
    tally: Tally,
}

/// What the run has done in this process.
#[derive(Default)]
struct Tally {
    first_step_peak: Option<u64>,
    ooms: usize,
    samples: u64,
    peak: u64,
    peak_by_tag: Vec<TagBytes>,
    last_loss: f64,
    metric: Option<f64>,
    seconds: f64,
}

impl Trainer {
    /// A new run of `config`: validated, its data read, its micro-batch size planned (unless
    /// the configuration fixes it), its model and optimizer built.
    pub fn new(config: TrainConfig) -> Result<Self> {
        Self::open(config, false)
    }

    /// The run of `config` continued from the checkpoint in its run directory.
    pub fn resume(config: TrainConfig) -> Result<Self> {
        Self::open(config, true)
    }

    /// A new run of `config` on a task of the caller's (its own datasets and metric) instead
    /// of the one `config.data` describes.
    pub fn with_task(config: TrainConfig, task: Task) -> Result<Self> {
        config.validate()?;
        Self::build(config, task, false)
    }

    fn open(config: TrainConfig, resume: bool) -> Result<Self> {
        config.validate()?;
        let task = Task::from_config(&config.data, config.seed)?;
        Self::build(config, task, resume)
    }

    fn build(config: TrainConfig, task: Task, resume: bool) -> Result<Self> {
        let budget = device::budget(&config)?;
        let path = checkpoint_path(&config.run_dir);
        if resume && !path.exists() {
            return Err(Error::config(format!(
                "--resume: no checkpoint at {}",
                path.display()
            )));
        }
        let device = device::open(&config, &budget)?;
        let plan = match (config.batch.micro, resume) {
            (None, false) => Some(plan(&config, &task, &budget, device.plan_target())?),
            _ => None,
        };
        let start = plan
            .as_ref()
            .map(|p| p.micro)
            .or(config.batch.micro)
            .unwrap_or(config.batch.size);
        let mut model = TrainModel::build(&config.model, task.train.shape(), &device, config.seed)?;
        let mut optimizer = build_optimizer(&config.optimizer, model.module())?;
        let mut state = TrainerState {
            step: 0,
            next: Position::default(),
            micro: MicroBatcher::new(start, config.batch.size, config.batch.grow_after),
            scaler: LossScaler::new(&config.precision),
            dropout_calls: 0,
            predicted_peak: plan.as_ref().map(|p| p.predicted_peak),
        };
        if resume {
            state = restore(&path, &device, &mut model, &mut *optimizer)?;
            tracing::info!(step = state.step, "resumed from {}", path.display());
        }
        let batches_per_epoch = task.train.len().div_ceil(config.batch.size) as u64;
        let total_steps = match (config.steps, config.epochs) {
            (Some(steps), _) => steps,
            (None, Some(epochs)) => epochs * batches_per_epoch,
            (None, None) => crate::config::DEFAULT_STEPS,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("headroom-{i}"))
            .build()
            .map_err(|e| Error::io("the thread pool")(std::io::Error::other(e)))?;
        Ok(Self {
            schedule: schedule(&config.optimizer, total_steps),
            micro: state.micro,
            scaler: state.scaler,
            predicted_peak: state.predicted_peak,
            step: state.step,
            next: state.next,
            loader: None,
            pool: Arc::new(pool),
            tally: Tally::default(),
            config,
            budget,
            device,
            task,
            model,
            optimizer,
            total_steps,
            batches_per_epoch,
            plan,
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

    /// Runs `f` inside the trainer's thread pool, so that kernels do not hand their work to
    /// another thread for every call.
    fn in_pool<R: Send>(&mut self, f: impl FnOnce(&mut Self) -> R + Send) -> R {
        let pool = Arc::clone(&self.pool);
        pool.install(|| f(self))
    }

    /// One optimizer step on the next batch, micro-batches adapting to memory.
    pub fn train_step(&mut self) -> Result<StepReport> {
        self.in_pool(|t| t.step_with(None))
    }

    /// One optimizer step on the next batch, cut into exactly these micro-batch sizes (they
    /// must add up to the batch): how a recovered step is replayed without its failures.
    pub fn train_step_with(&mut self, sizes: &[usize]) -> Result<StepReport> {
        self.in_pool(|t| t.step_with(Some(sizes)))
    }

    fn step_with(&mut self, fixed: Option<&[usize]>) -> Result<StepReport> {
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
        self.optimizer.set_lr(self.schedule.at(self.step));
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
        self.step += 1;
        self.next = if position.batch + 1 >= self.batches_per_epoch {
            Position {
                epoch: position.epoch + 1,
                batch: 0,
            }
        } else {
            Position {
                epoch: position.epoch,
                batch: position.batch + 1,
            }
        };
        Ok(report)
    }

    /// The held-out metric now.
    pub fn evaluate(&mut self) -> Result<f64> {
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
        };
        save(
            &checkpoint_path(&self.config.run_dir),
            &self.model,
            &*self.optimizer,
            &state,
        )
    }

    /// Trains to the end: every step recorded in `metrics.jsonl`, the metric evaluated and a
    /// checkpoint written on schedule and at the end, then the plots, the allocator's trace
    /// and the summary.
    pub fn run(&mut self, progress: bool) -> Result<Summary> {
        let dir = self.config.run_dir.clone();
        std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
        let config_path = dir.join("config.toml");
        std::fs::write(&config_path, self.config.to_toml()).map_err(Error::io(&config_path))?;
        let bar = if progress {
            ProgressBar::new(self.total_steps)
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:28}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_position(self.step);
        let started = Instant::now();
        while self.step < self.total_steps {
            let step_started = Instant::now();
            let position = self.next;
            let lr = self.schedule.at(self.step);
            let report = self.train_step()?;
            let seconds = step_started.elapsed().as_secs_f64();
            let metric = if self.config.eval_every > 0
                && self.step.is_multiple_of(self.config.eval_every)
                && self.step < self.total_steps
            {
                let m = self.evaluate()?;
                tracing::info!(
                    step = self.step,
                    "held-out {}: {m:.4}",
                    self.task.metric.name()
                );
                Some(m)
            } else {
                None
            };
            let record = self.record(&report, position.epoch, lr, seconds, started, metric);
            append(&dir, &record)?;
            bar.set_position(self.step);
            bar.set_message(format!(
                "loss {:.4} | {:.0} tok/s | micro {} | mem {} (peak {}) of {}",
                record.loss,
                record.tokens_per_s,
                self.micro.size(),
                headroom_alloc::format_bytes(record.in_use),
                headroom_alloc::format_bytes(record.peak),
                headroom_alloc::format_bytes(record.limit),
            ));
            if self.config.checkpoint.every > 0
                && self.step.is_multiple_of(self.config.checkpoint.every)
            {
                self.save_checkpoint()?;
                tracing::info!(step = self.step, "checkpoint written");
            }
        }
        bar.finish_and_clear();
        self.tally.seconds = started.elapsed().as_secs_f64();
        self.tally.metric = Some(self.evaluate()?);
        self.save_checkpoint()?;
        self.write_artifacts()?;
        let summary = self.summary();
        let path = dir.join("summary.json");
        let json =
            serde_json::to_string_pretty(&summary).map_err(|e| Error::io(&path)(e.into()))?;
        std::fs::write(&path, json).map_err(Error::io(&path))?;
        Ok(summary)
    }

    /// Builds a step's record and adds it to the tally.
    fn record(
        &mut self,
        report: &StepReport,
        epoch: u64,
        lr: f64,
        seconds: f64,
        started: Instant,
        metric: Option<f64>,
    ) -> StepRecord {
        let stats = self.device.allocator().stats();
        let tags = tag_bytes(&stats);
        let tally = &mut self.tally;
        if tally.first_step_peak.is_none() {
            tally.first_step_peak = Some(stats.peak_in_use);
            if let Some(predicted) = self.predicted_peak {
                tracing::info!(
                    "first step: measured peak {} beside the planner's {}",
                    headroom_alloc::format_bytes(stats.peak_in_use),
                    headroom_alloc::format_bytes(predicted)
                );
            }
        }
        tally.ooms += report.ooms.len();
        tally.samples += report.samples as u64;
        tally.peak = tally.peak.max(stats.peak_in_use);
        tally.last_loss = report.loss;
        for t in &tags {
            match tally.peak_by_tag.iter_mut().find(|p| p.tag == t.tag) {
                Some(p) => p.peak = p.peak.max(t.peak),
                None => tally.peak_by_tag.push(t.clone()),
            }
        }
        StepRecord {
            step: self.step,
            epoch,
            loss: report.loss,
            lr,
            micro_sizes: report.micro_sizes.clone(),
            ooms: report.ooms.len(),
            skipped: report.skipped,
            grad_norm: report.grad_norm,
            loss_scale: self.scaler.scale,
            samples_per_s: report.samples as f64 / seconds.max(1e-9),
            tokens_per_s: report.scored as f64 / seconds.max(1e-9),
            in_use: stats.in_use,
            peak: stats.peak_in_use,
            limit: self.budget.limit,
            tags,
            metric,
            elapsed_s: started.elapsed().as_secs_f64(),
        }
    }

    /// The plots and the allocator's trace, in the run directory.
    fn write_artifacts(&self) -> Result<()> {
        let dir = &self.config.run_dir;
        let records = read_all(dir)?;
        crate::plots::loss_curve(&records, &dir.join("loss.svg"))?;
        crate::plots::memory_timeline(&records, &dir.join("memory.svg"))?;
        let trace = dir.join("memory-trace.json");
        let file = std::fs::File::create(&trace).map_err(Error::io(&trace))?;
        self.device
            .allocator()
            .with(|a| match a.history() {
                Some(history) => history.write_chrome_trace(std::io::BufWriter::new(file)),
                None => Ok(()),
            })
            .map_err(Error::io(&trace))
    }

    /// What the run did.
    pub fn summary(&self) -> Summary {
        let mut peak_by_tag = self.tally.peak_by_tag.clone();
        peak_by_tag.sort_by_key(|t| std::cmp::Reverse(t.peak));
        Summary {
            metric_name: self.task.metric.name().to_owned(),
            metric: self.tally.metric,
            steps: self.step,
            samples: self.tally.samples,
            elapsed_s: self.tally.seconds,
            final_loss: self.tally.last_loss,
            ooms_recovered: self.tally.ooms,
            micro_history: self.micro.history.clone(),
            plan: self.plan.clone(),
            first_step_peak: self.tally.first_step_peak,
            peak_by_tag,
            peak: self.tally.peak,
            peak_reserved: self.device.allocator().stats().peak_reserved,
            limit: self.budget.limit,
        }
    }
}
