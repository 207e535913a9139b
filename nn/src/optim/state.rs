//! What an optimizer keeps: its step count and, per parameter in the model's visiting order,
//! its buffers (moments, momentum), named as PyTorch's state dict names them, in the precision
//! the optimizer was built with.

use headroom_alloc::Tag;
use headroom_autograd::{Gradients, Tensor};
use headroom_kernels::ops::optim::{Quantized, Update};
use headroom_kernels::{Array, DType, Device};

use super::StateShard;
use super::host_updates::{HostCopies, HostUpdate, HostUpdates, Outcome};
use crate::error::{Error, Result};
use crate::module::Module;

/// How an optimizer stores its state buffers: what `optimizer.state` selects. Narrower state
/// frees memory for a slightly noisier optimization: bf16 takes 4 bytes a parameter for AdamW's
/// two moments where f32 takes 8, 8-bit takes 2 (and a scale per 2048 elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StatePrecision {
    /// In the parameter's dtype (f32 for a model's weights).
    #[default]
    Full,
    /// bf16, rounded stochastically (for parameters computed in f32).
    Bf16,
    /// Block-wise 8-bit codes with a scale per block (Dettmers et al. 2022), rounded
    /// stochastically (for parameters computed in f32).
    Int8,
}

impl std::fmt::Display for StatePrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            Self::Full => "the parameter's own dtype",
            Self::Bf16 => "bf16",
            Self::Int8 => "int8",
        })
    }
}

impl StatePrecision {
    /// Bytes of one buffer for a parameter of `numel` elements of `dtype`.
    pub fn buffer_bytes(self, numel: usize, dtype: DType) -> u64 {
        let numel = numel as u64;
        match self {
            StatePrecision::Full => numel * dtype.size() as u64,
            StatePrecision::Bf16 => numel * 2,
            StatePrecision::Int8 => {
                numel + 4 * numel.div_ceil(headroom_kernels::ops::optim::QUANT_BLOCK as u64)
            }
        }
    }
}

/// The suffix a plain buffer's array adds to the buffer's name: none.
const PLAIN: &str = "";
/// The suffix of 8-bit codes: none, they keep the buffer's name...
const CODES: &str = "";
/// ...and their scales add this.
const SCALES: &str = "_absmax";

/// One state buffer of one parameter.
#[derive(Debug)]
pub enum StateBuffer {
    /// Elements in the parameter's shape, in its dtype or in bf16.
    Plain(Array),
    /// Block-wise 8-bit codes and their scales.
    Quantized(Quantized),
}

impl StateBuffer {
    /// Zeros for `param` in `precision`, tagged `tag`.
    fn zeros(device: &Device, param: &Tensor, precision: StatePrecision, tag: Tag) -> Result<Self> {
        let _tag = device.scoped_tag(tag);
        let shape = param.shape().clone();
        Ok(match precision {
            StatePrecision::Full => Self::Plain(Array::zeros(device, shape, param.dtype())?),
            StatePrecision::Bf16 => Self::Plain(Array::zeros(device, shape, DType::BF16)?),
            StatePrecision::Int8 => Self::Quantized(Quantized::zeros(device, shape)?),
        })
    }

    /// The arrays it is made of, each with the suffix of its name (the codes keep the
    /// buffer's name, their scales add `_absmax`).
    fn arrays(&self) -> Vec<(&'static str, &Array)> {
        match self {
            Self::Plain(array) => vec![(PLAIN, array)],
            Self::Quantized(q) => vec![(CODES, &q.codes), (SCALES, &q.scales)],
        }
    }

    /// The same, mutably.
    fn arrays_mut(&mut self) -> Vec<(&'static str, &mut Array)> {
        match self {
            Self::Plain(array) => vec![(PLAIN, array)],
            Self::Quantized(q) => vec![(CODES, &mut q.codes), (SCALES, &mut q.scales)],
        }
    }

    /// The same with every array replaced by `load(its suffix)`.
    fn reloaded(&self, load: &mut dyn FnMut(&'static str) -> Result<Array>) -> Result<Self> {
        Ok(match self {
            Self::Plain(_) => Self::Plain(load(PLAIN)?),
            Self::Quantized(_) => Self::Quantized(Quantized {
                codes: load(CODES)?,
                scales: load(SCALES)?,
            }),
        })
    }

    /// True when it is state for `param` kept in `precision`.
    fn fits(&self, param: &Tensor, precision: StatePrecision) -> bool {
        match (self, precision) {
            (Self::Plain(array), StatePrecision::Full) => {
                array.shape() == param.shape() && array.dtype() == param.dtype()
            }
            (Self::Plain(array), StatePrecision::Bf16) => array.shape() == param.shape(),
            (Self::Quantized(q), StatePrecision::Int8) => q.codes.shape() == param.shape(),
            _ => false,
        }
    }
}

/// How an optimizer updates one parameter from its gradient and its state buffers (the
/// hyper-parameters of a fused kernel: AdamW's, SGD's).
pub trait UpdateRule: Send + Sync + std::fmt::Debug {
    /// Updates `param` from `grad` as `update` says, with the parameter's `buffers`.
    fn update(
        &self,
        update: Update,
        param: &mut Tensor,
        grad: &Array,
        buffers: &mut [StateBuffer],
    ) -> Result<()>;

    /// The rule as it is now (its learning rate changes between steps), for an update run by
    /// another thread.
    fn boxed(&self) -> Box<dyn UpdateRule>;
}

/// What the updates of a step run by the host tier's thread came to, once landed
/// ([`OptimizerState::land`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Landed {
    /// Parameters written back.
    pub updated: usize,
    /// The squares of the gradients checked on the host ([`OptimizerState::step_one`]'s),
    /// summed: their share of the square of the global norm.
    pub squares: f64,
    /// The first parameter (its index in visiting order) whose gradient held a NaN or an
    /// infinity: it, and every parameter whose update started after it, are as they were,
    /// state included.
    pub non_finite: Option<usize>,
}

/// An optimizer's state: the updates done, and each parameter's buffers, or this rank's share
/// of them when a data-parallel run shards the state ([`StateShard`]).
#[derive(Debug)]
pub struct OptimizerState {
    /// Updates done so far.
    steps: u64,
    /// The names of each parameter's buffers; every slot this rank keeps holds this many.
    names: &'static [&'static str],
    /// How the buffers are stored.
    precision: StatePrecision,
    /// One per parameter, in the model's visiting order.
    slots: Vec<Slot>,
    /// Which rank keeps each slot's buffers; it assigns one owner to each slot.
    shard: StateShard,
    /// The host tier that holds every buffer and runs the updates (optimizer offloading);
    /// none: the buffers are on their parameters' devices.
    host: Option<Device>,
    /// The updates started on the host tier's thread and not landed yet.
    updates: HostUpdates,
}

/// The buffers of one parameter.
#[derive(Debug)]
struct Slot {
    name: String,
    /// One per name of the state's, or none where another rank keeps them.
    buffers: Vec<StateBuffer>,
    /// Where the state is in the host tier apart from the parameter: the copies of the
    /// parameter and of its gradient that its updates are made on there.
    copies: Option<HostCopies>,
}

/// One buffer as [`OptimizerState::share_buffers`] hands it over.
#[derive(Debug)]
pub enum Shared<'a> {
    /// This rank's own buffer, or zeros of its shape and dtype to receive it into.
    Here(&'a mut Array),
    /// The zeros to receive it into did not fit; the error says why.
    NoRoom(&'a Error),
}

/// The suffixes of the arrays one buffer kept in `precision` is made of (see
/// [`StateBuffer::arrays`]).
fn suffixes(precision: StatePrecision) -> &'static [&'static str] {
    match precision {
        StatePrecision::Int8 => &[CODES, SCALES],
        StatePrecision::Full | StatePrecision::Bf16 => &[PLAIN],
    }
}

/// The name of the array of `suffix` of buffer `buffer` of parameter `param`, as a state dict
/// names it.
fn key(param: &str, buffer: &str, suffix: &str) -> String {
    format!("{param}.{buffer}{suffix}")
}

impl OptimizerState {
    /// Zeroed buffers named `names` for every parameter of `model`, each of its shape, stored
    /// in `precision`, tagged as optimizer state.
    pub fn zeroed(
        model: &dyn Module,
        names: &'static [&'static str],
        precision: StatePrecision,
    ) -> Result<Self> {
        Self::zeroed_shard(model, names, precision, StateShard::whole(model))
    }

    /// The same for the parameters whose state `shard` gives this rank; the other slots hold
    /// no buffers.
    pub fn zeroed_shard(
        model: &dyn Module,
        names: &'static [&'static str],
        precision: StatePrecision,
        shard: StateShard,
    ) -> Result<Self> {
        Self::zeroed_on(model, names, precision, shard, None)
    }

    /// [`OptimizerState::zeroed_shard`], the buffers on `host` when given (the device's host
    /// tier, ZeRO-Offload's placement), with a copy of each parameter and of its gradient
    /// there: each update then copies its parameter and gradient into them, runs there on a
    /// host thread, and copies the parameter back, with the same arithmetic as on the device.
    pub fn zeroed_on(
        model: &dyn Module,
        names: &'static [&'static str],
        precision: StatePrecision,
        shard: StateShard,
        host: Option<&Device>,
    ) -> Result<Self> {
        let params = model.named_parameters();
        if shard.len() != params.len() {
            return Err(Error::config(
                "optimizer state shard",
                format!(
                    "the shard assigns {} parameters, the model has {}",
                    shard.len(),
                    params.len()
                ),
            ));
        }
        let slots = params
            .into_iter()
            .enumerate()
            .map(|(index, (name, t))| {
                if precision != StatePrecision::Full
                    && !matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16)
                {
                    return Err(Error::config(
                        "optimizer state",
                        format!(
                            "parameter `{name}` is {}: state in {precision} is for parameters in f32, f16 or bf16",
                            t.dtype()
                        ),
                    ));
                }
                let kept = if shard.keeps(index) { names } else { &[] };
                let device = host.unwrap_or(t.device());
                let buffers = kept
                    .iter()
                    .map(|_| StateBuffer::zeros(device, &t, precision, Tag::OPTIMIZER_STATE))
                    .collect::<Result<Vec<_>>>()?;
                let copies = match host {
                    Some(host) if !kept.is_empty() && !t.device().same(host) => {
                        Some(HostCopies::new(host, &t)?)
                    }
                    _ => None,
                };
                Ok(Slot {
                    name,
                    buffers,
                    copies,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            steps: 0,
            names,
            precision,
            slots,
            shard,
            host: host.cloned(),
            updates: HostUpdates::default(),
        })
    }

    /// The host tier that holds the buffers and runs the updates, if the state is offloaded.
    pub fn host(&self) -> Option<&Device> {
        self.host.as_ref()
    }

    /// Which rank keeps each parameter's buffers.
    pub fn shard(&self) -> &StateShard {
        &self.shard
    }

    /// Updates done so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// How the buffers are stored.
    pub fn precision(&self) -> StatePrecision {
        self.precision
    }

    /// One update: `rule` runs on each parameter that has a gradient and whose state this rank
    /// keeps, with the step's [`Update`] (the step number, `grad_scale`, the parameter's index
    /// as its rounding stream) and the parameter's buffers; then the count grows by one.
    /// Everything is checked before anything is updated (names, shapes and dtypes of
    /// parameters, gradients and state, and that no other handle shares a parameter), so a
    /// refused step leaves the model as it was. An offloaded state's updates run on the host
    /// tier's thread, one parameter's while the next one's copies are queued, and land before
    /// this returns.
    pub fn step(
        &mut self,
        model: &mut dyn Module,
        grads: &Gradients,
        grad_scale: f64,
        rule: &dyn UpdateRule,
    ) -> Result<()> {
        self.check(model, grads)?;
        let step = Update::new(self.steps + 1).scaled(grad_scale);
        let mut index = 0;
        let (slots, shard) = (&mut self.slots, &self.shard);
        let (host, updates) = (self.host.as_ref(), &mut self.updates);
        let started = model.visit_parameters_mut(&mut |_, param| {
            let slot = &mut slots[index];
            index += 1;
            match grads.get(param) {
                Some(grad) if shard.keeps(index - 1) => {
                    let update = step.on_stream(index as u64 - 1);
                    let host = host.map(|host| (host, &mut *updates));
                    update_slot(rule, update, (index - 1, param), grad, slot, host, false)
                }
                _ => Ok(()),
            }
        });
        let landed = self.land(model);
        started?;
        landed?;
        self.steps += 1;
        Ok(())
    }

    /// The update of parameter number `index` (in visiting order, named `name`) within the
    /// step under way, as [`OptimizerState::step`] makes it for that parameter, after the same
    /// checks; the count does not move until [`OptimizerState::finish_step`]. For updates made
    /// one parameter at a time, as each gradient completes. Where the state is offloaded, the
    /// update is only started: the host tier's thread checks the gradient (its squares summed,
    /// no update unless finite) and runs it while the caller goes on, and
    /// [`OptimizerState::land`] writes the parameter back.
    pub fn step_one(
        &mut self,
        index: usize,
        name: &str,
        param: &mut Tensor,
        grad: &Array,
        grad_scale: f64,
        rule: &dyn UpdateRule,
    ) -> Result<()> {
        let Some(slot) = self.slots.get_mut(index) else {
            return Err(Error::config(
                "optimizer step",
                format!(
                    "parameter `{name}` has no state: the optimizer was built for a smaller model"
                ),
            ));
        };
        if !self.shard.keeps(index) {
            return Err(Error::config(
                "optimizer step",
                format!(
                    "the state of parameter `{name}` is kept by rank {}, not this one (rank {})",
                    self.shard.owner(index).unwrap_or(0),
                    self.shard.rank()
                ),
            ));
        }
        if let Some(problem) = problem(slot, Some(self.precision), name, param, Some(grad)) {
            return Err(Error::config("optimizer step", problem));
        }
        let step = Update::new(self.steps + 1)
            .scaled(grad_scale)
            .on_stream(index as u64);
        let host = self.host.as_ref().map(|host| (host, &mut self.updates));
        update_slot(rule, step, (index, param), grad, slot, host, true)
    }

    /// Ends the step whose parameters [`OptimizerState::step_one`] updated: the updates still
    /// on the host tier land ([`OptimizerState::land`]), and the count grows by one unless a
    /// gradient was not finite.
    pub fn finish_step(&mut self, model: &mut dyn Module) -> Result<Landed> {
        let landed = self.land(model)?;
        if landed.non_finite.is_none() {
            self.steps += 1;
        }
        Ok(landed)
    }

    /// Waits for the updates started on the host tier's thread, writes each updated parameter
    /// of `model` back in place (queued on its device) and gives each slot its state and its
    /// copies back. An update that failed leaves its parameter as it was, and the first
    /// failure is returned once everything else landed. Nothing to land: nothing happens.
    pub fn land(&mut self, model: &mut dyn Module) -> Result<Landed> {
        let mut done = self.updates.wait_all()?;
        if done.is_empty() {
            return Ok(Landed::default());
        }
        let mut landed = Landed::default();
        let mut failure = None;
        let mut written: Vec<Option<&Tensor>> = vec![None; self.slots.len()];
        for job in &mut done {
            self.slots[job.index].buffers = std::mem::take(&mut job.buffers);
            match std::mem::replace(&mut job.outcome, Outcome::Waiting) {
                Outcome::Updated { squares } => {
                    landed.updated += 1;
                    landed.squares += squares;
                    written[job.index] = Some(&job.copies.param);
                }
                Outcome::NonFinite => {
                    landed.non_finite.get_or_insert(job.index);
                }
                Outcome::Failed(err) => {
                    failure.get_or_insert(err);
                }
                Outcome::Waiting | Outcome::Skipped => {}
            }
        }
        let mut index = 0;
        let wrote = model.visit_parameters_mut(&mut |_, param| {
            if let Some(copy) = written.get(index).copied().flatten() {
                param.array_mut().write_from(copy.array())?;
            }
            index += 1;
            Ok(())
        });
        drop(written);
        for job in done {
            self.slots[job.index].copies = Some(job.copies);
        }
        wrote?;
        match failure {
            Some(err) => Err(err),
            None => Ok(landed),
        }
    }

    /// The first reason a step of `model` with `grads` cannot run on this state, if any.
    fn check(&self, model: &dyn Module, grads: &Gradients) -> Result<()> {
        let slots = &self.slots;
        let mut problems = Vec::new();
        let mut count = 0;
        model.visit_parameters(&mut |name, param| {
            let found = match slots.get(count) {
                None => Some(format!(
                    "parameter `{name}` has no state: the optimizer was built for a smaller model"
                )),
                Some(slot) => {
                    let precision = self.shard.keeps(count).then_some(self.precision);
                    problem(slot, precision, name, param, grads.get(param))
                }
            };
            problems.extend(found);
            count += 1;
        });
        if count != slots.len() {
            problems.push(format!(
                "the model has {count} parameters, the optimizer state {}",
                slots.len()
            ));
        }
        match problems.into_iter().next() {
            Some(problem) => Err(Error::config("optimizer step", problem)),
            None => Ok(()),
        }
    }

    /// Every buffer this rank keeps, named `{parameter}.{buffer name}` (and `{...}_absmax` for
    /// the scales of 8-bit state).
    pub fn named(&self) -> Vec<(String, Array)> {
        let mut out = Vec::new();
        for slot in &self.slots {
            for (buffer, n) in slot.buffers.iter().zip(self.names) {
                for (suffix, array) in buffer.arrays() {
                    out.push((key(&slot.name, n, suffix), array.clone()));
                }
            }
        }
        out
    }

    /// Calls `share` with every buffer of every parameter of `model`, in [`named`]'s order
    /// and names, and with the rank that keeps it: this rank's own buffers, and for the others
    /// zeros of their shape and dtype on the parameter's device, tagged as workspace (for
    /// `share` to receive them into, one parameter's at a time), or the error that says why
    /// they did not fit. The ranks of a sharded state gather it this way, each broadcasting what
    /// it keeps. The first error `share` returns stops the walk and is returned, in the caller's
    /// own error type.
    ///
    /// [`named`]: OptimizerState::named
    pub fn share_buffers<E: From<Error>>(
        &mut self,
        model: &dyn Module,
        share: &mut dyn FnMut(usize, &str, Shared<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        self.check(model, &Gradients::default())?;
        for (index, param) in model.parameters().iter().enumerate() {
            let owner = self.shard.owner(index).unwrap_or(0);
            let slot = &mut self.slots[index];
            let mut received: Vec<StateBuffer>;
            let buffers = if self.shard.keeps(index) {
                &mut slot.buffers
            } else {
                let zeros = self
                    .names
                    .iter()
                    .map(|_| {
                        StateBuffer::zeros(param.device(), param, self.precision, Tag::WORKSPACE)
                    })
                    .collect::<Result<Vec<_>>>();
                match zeros {
                    Ok(zeros) => received = zeros,
                    Err(err) => {
                        for n in self.names {
                            for suffix in suffixes(self.precision) {
                                share(owner, &key(&slot.name, n, suffix), Shared::NoRoom(&err))?;
                            }
                        }
                        continue;
                    }
                }
                &mut received
            };
            for (buffer, n) in buffers.iter_mut().zip(self.names) {
                for (suffix, array) in buffer.arrays_mut() {
                    share(owner, &key(&slot.name, n, suffix), Shared::Here(array))?;
                }
            }
        }
        Ok(())
    }

    /// Replaces each buffer this rank keeps with `load(its name)`, which must have its shape
    /// and dtype, and the count with `steps`. Nothing changes unless every buffer loads and
    /// fits.
    pub fn load(&mut self, load: &dyn Fn(&str) -> Result<Array>, steps: u64) -> Result<()> {
        let mut loaded = Vec::with_capacity(self.slots.len());
        for slot in &self.slots {
            let mut buffers = Vec::with_capacity(slot.buffers.len());
            for (old, n) in slot.buffers.iter().zip(self.names) {
                let olds = old.arrays();
                let mut at = 0;
                let new = old.reloaded(&mut |suffix| {
                    let key = key(&slot.name, n, suffix);
                    let new = match &self.host {
                        Some(host) => {
                            let _state = host.scoped_tag(Tag::OPTIMIZER_STATE);
                            load(&key)?.to_device(host)?
                        }
                        None => load(&key)?,
                    };
                    let (_, old) = olds[at];
                    at += 1;
                    if new.shape() != old.shape() || new.dtype() != old.dtype() {
                        return Err(Error::config(
                            "optimizer state",
                            format!(
                                "`{key}` is {} of {}, the optimizer needs {} of {} (state kept as {})",
                                new.shape(),
                                new.dtype(),
                                old.shape(),
                                old.dtype(),
                                self.precision
                            ),
                        ));
                    }
                    Ok(new)
                })?;
                buffers.push(new);
            }
            loaded.push(buffers);
        }
        for (slot, buffers) in self.slots.iter_mut().zip(loaded) {
            slot.buffers = buffers;
        }
        self.steps = steps;
        Ok(())
    }

    /// Bytes the buffers hold.
    pub fn bytes(&self) -> u64 {
        self.slots
            .iter()
            .flat_map(|s| &s.buffers)
            .flat_map(StateBuffer::arrays)
            .map(|(_, b)| b.buffer().bytes() as u64)
            .sum()
    }
}

/// `rule`'s update of parameter `index`, `param`, from `grad` with the buffers of its `slot`:
/// where they are, or, where the state is on `host` apart from the parameter, started on the
/// host tier's thread ([`HostUpdates`]) on the slot's copies of the parameter and the
/// gradient, the gradient `check`ed there first.
fn update_slot(
    rule: &dyn UpdateRule,
    update: Update,
    (index, param): (usize, &mut Tensor),
    grad: &Array,
    slot: &mut Slot,
    host: Option<(&Device, &mut HostUpdates)>,
    check: bool,
) -> Result<()> {
    let Some((host, updates)) = host.filter(|(host, _)| !param.device().same(host)) else {
        // On the device, or a streamed weight already on the host with its state.
        return rule.update(update, param, grad, &mut slot.buffers);
    };
    let mut copies = match slot.copies.take() {
        Some(copies) => copies,
        None => HostCopies::new(host, param)?,
    };
    let copied = copies.param.array_mut().write_from(param.array());
    if let Err(err) = copied.and_then(|()| copies.grad.write_from(grad)) {
        slot.copies = Some(copies);
        return Err(err.into());
    }
    updates.start(
        HostUpdate {
            index,
            rule: rule.boxed(),
            update,
            copies,
            buffers: std::mem::take(&mut slot.buffers),
            check,
            step: 0,
            outcome: Outcome::Waiting,
        },
        grad,
    )
}

/// Why `slot` cannot take a step of parameter `name` with gradient `grad`, if it cannot; its
/// buffers are checked against `precision` where this rank keeps them (`Some`).
fn problem(
    slot: &Slot,
    precision: Option<StatePrecision>,
    name: &str,
    param: &Tensor,
    grad: Option<&Array>,
) -> Option<String> {
    let fits = |a: &Array| a.shape() == param.shape() && a.dtype() == param.dtype();
    if slot.name != name {
        Some(format!(
            "parameter `{name}` where the optimizer expected `{}`",
            slot.name
        ))
    } else if let Some(precision) = precision
        && !slot.buffers.iter().all(|b| b.fits(param, precision))
    {
        Some(format!(
            "parameter `{name}` is {} of {}, its state ({precision}) is not",
            param.shape(),
            param.dtype(),
        ))
    } else if grad.is_some_and(|g| !fits(g)) {
        Some(format!(
            "the gradient of `{name}` does not match its {} of {}",
            param.shape(),
            param.dtype()
        ))
    } else if grad.is_some() && param.array().is_shared() {
        Some(format!(
            "parameter `{name}` is shared with another handle (a live tape or a clone); drop it before stepping"
        ))
    } else {
        None
    }
}
