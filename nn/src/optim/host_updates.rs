//! Updates of an offloaded optimizer state run by a host thread while the device goes on with
//! the work queued after each gradient (ZeRO-Offload's overlap of the update with the backward
//! pass).
//!
//! The rule: starting an update copies the parameter and its gradient into the host tier's
//! copies of them (queued on the device) and hands those, with the parameter's state, to the
//! host thread, which waits for the two copies and updates the parameter's copy; the caller
//! goes on at once. Landing waits for every update started and writes each parameter back in
//! place (queued). The copies are allocated with the state, once, and kept (ZeRO-Offload keeps
//! its parameters and gradients on the host too), so that a step allocates and frees nothing
//! in the host tier whatever the thread's timing, and the tier's peak is the planner's. A
//! planning device's updates run at once, in the caller's thread: they compute nothing, and
//! their priced work adds up in the same order every time.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use headroom_alloc::Tag;
use headroom_autograd::Tensor;
use headroom_kernels::ops::optim::Update;
use headroom_kernels::{Array, Device, DeviceKind};

use super::{StateBuffer, UpdateRule};
use crate::error::{Error, Result};

/// One parameter's update handed to the host thread, and what comes back.
#[derive(Debug)]
pub(super) struct HostUpdate {
    /// The parameter's index in the model's visiting order.
    pub index: usize,
    /// The rule's hyper-parameters for this step.
    pub rule: Box<dyn UpdateRule>,
    pub update: Update,
    /// The parameter's and the gradient's copies in the host tier; the parameter's is updated
    /// in place.
    pub copies: HostCopies,
    /// The parameter's state, in the host tier; it comes back with the update.
    pub buffers: Vec<StateBuffer>,
    /// Check the gradient first: its squares summed, and no update unless they are finite
    /// (the optimizer step in the backward pass, whose caller cannot look at the gradient
    /// without waiting for the device).
    pub check: bool,
    /// The landing it belongs to: the first update of a step is not stopped by an earlier
    /// step's gradient.
    pub step: u64,
    /// What became of it; `Waiting` until it ran.
    pub outcome: Outcome,
}

/// A parameter's copy in the host tier, and its gradient's, that its updates are made on.
#[derive(Debug)]
pub(super) struct HostCopies {
    pub param: Tensor,
    pub grad: Array,
}

impl HostCopies {
    /// Copies for `param` in `host`, tagged as weights and gradients.
    pub fn new(host: &Device, param: &Tensor) -> Result<Self> {
        let zeros = |tag| {
            let _tag = host.scoped_tag(tag);
            Array::zeros(host, param.shape().clone(), param.dtype())
        };
        Ok(Self {
            param: Tensor::new(zeros(Tag::WEIGHTS)?),
            grad: zeros(Tag::GRADIENTS)?,
        })
    }
}

/// What became of an update.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Not run yet.
    Waiting,
    /// Run; the gradient's squares summed when it was checked (else 0).
    Updated { squares: f64 },
    /// Refused: the gradient holds a NaN or an infinity; the parameter and its state are as
    /// they were, and so are those of every update started after it.
    NonFinite,
    /// Not run, because an earlier gradient of the step was not finite.
    Skipped,
    /// The update failed.
    Failed(Error),
}

/// The host thread and the updates it has been handed since the last landing.
#[derive(Debug, Default)]
pub(super) struct HostUpdates {
    /// Started on first use.
    thread: Option<Worker>,
    /// Updates run at once (a planning device's), in the order they started.
    ran: Vec<HostUpdate>,
    /// Updates handed to the thread and not yet back.
    handed: usize,
    /// Landings so far: the step that updates started now belong to.
    landings: u64,
    /// The device's gradient of the update started last, kept until the next one starts or
    /// the landing: freed at once, its memory would have the device's kernels wait for the
    /// copy that reads it there and then, instead of running beside it.
    reading: Option<Array>,
}

/// The thread and its two queues.
#[derive(Debug)]
struct Worker {
    jobs: Option<Sender<Box<HostUpdate>>>,
    done: Receiver<Box<HostUpdate>>,
    handle: Option<JoinHandle<()>>,
}

impl HostUpdates {
    /// Hands `job` over, its gradient copied from the device's `gradient`: to the host thread,
    /// or run at once where its arrays are a plan's.
    pub fn start(&mut self, mut job: HostUpdate, gradient: &Array) -> Result<()> {
        self.reading = Some(gradient.clone());
        job.step = self.landings;
        if job.copies.param.device().kind() == DeviceKind::Meta {
            // The host works on the copies once they have arrived.
            job.copies.param.array().settle()?;
            job.copies.grad.settle()?;
            let stopped = self.ran.iter().any(|ran| stops(&ran.outcome));
            run(&mut job, stopped);
            self.ran.push(job);
            return Ok(());
        }
        let worker = match &mut self.thread {
            Some(worker) => worker,
            empty => empty.insert(Worker::spawn()?),
        };
        let sent = worker
            .jobs
            .as_ref()
            .map(|jobs| jobs.send(Box::new(job)).is_ok());
        if sent != Some(true) {
            return Err(stopped_thread());
        }
        self.handed += 1;
        Ok(())
    }

    /// Waits for every update started since the last landing; returns them in the order they
    /// started, the caller to write them back and free them.
    pub fn wait_all(&mut self) -> Result<Vec<HostUpdate>> {
        self.reading = None;
        self.landings += 1;
        let mut all = std::mem::take(&mut self.ran);
        if let Some(first) = all.first() {
            // A plan's device waits for the host's updates, as a run's waits for the thread.
            first.copies.param.device().wait_for_planned_host_work();
        }
        if let Some(worker) = &self.thread {
            for _ in 0..std::mem::take(&mut self.handed) {
                all.push(*worker.done.recv().map_err(|_| stopped_thread())?);
            }
        }
        Ok(all)
    }
}

impl Worker {
    fn spawn() -> Result<Self> {
        let (jobs, inbox) = channel::<Box<HostUpdate>>();
        let (outbox, done) = channel();
        let handle = std::thread::Builder::new()
            .name("headroom-host-updates".into())
            .spawn(move || {
                // Once a gradient is not finite, the step's later updates are skipped.
                let mut stopped: Option<u64> = None;
                while let Ok(mut job) = inbox.recv() {
                    let after_a_non_finite = stopped == Some(job.step);
                    if run(&mut job, after_a_non_finite) {
                        stopped = Some(job.step);
                    }
                    if outbox.send(job).is_err() {
                        break;
                    }
                }
            })
            .map_err(|err| {
                Error::config(
                    "optimizer offload",
                    format!("cannot start the host tier's update thread: {err}"),
                )
            })?;
        Ok(Self {
            jobs: Some(jobs),
            done,
            handle: Some(handle),
        })
    }
}

impl Drop for Worker {
    /// Closes the queue and waits for the thread, so that nothing it holds outlives the state.
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(handle) = self.handle.take() {
            // A thread that panicked has nothing left to hand back.
            let _ = handle.join();
        }
    }
}

/// Runs `job` unless an earlier gradient of the step `stopped` the updates; returns whether
/// they are stopped after it.
fn run(job: &mut HostUpdate, stopped: bool) -> bool {
    if stopped {
        job.outcome = Outcome::Skipped;
        return true;
    }
    let squares = if job.check {
        match job.copies.grad.host_square_sum() {
            Ok(squares) if squares.is_finite() => squares,
            Ok(_) => {
                job.outcome = Outcome::NonFinite;
                return true;
            }
            Err(err) => {
                job.outcome = Outcome::Failed(headroom_autograd::Error::from(err).into());
                return false;
            }
        }
    } else {
        0.0
    };
    let HostCopies { param, grad } = &mut job.copies;
    let updated = job.rule.update(job.update, param, grad, &mut job.buffers);
    job.outcome = match updated {
        Ok(()) => Outcome::Updated { squares },
        Err(err) => Outcome::Failed(err),
    };
    stops(&job.outcome)
}

/// Whether an update that ended so stops the step's later ones.
fn stops(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::NonFinite | Outcome::Skipped)
}

fn stopped_thread() -> Error {
    Error::config(
        "optimizer offload",
        "the host tier's update thread stopped unexpectedly",
    )
}
