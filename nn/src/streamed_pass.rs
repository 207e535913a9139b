//! A pass over modules whose weights stream from the host tier, each module's weights fetched
//! one module ahead: while a module runs, the copies of the next one's weights go beside its
//! kernels. The forward pass runs the modules in order and fetches the later one ahead; the
//! backward pass runs them again (recomputed) in the reverse order and fetches the earlier one
//! ahead. The device holds two modules' weights meanwhile, as the planner, which runs the
//! same code, predicts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use headroom_kernels::Device;
use parking_lot::Mutex;

use crate::error::Result;
use crate::module::Module;
use crate::streaming::{WeightsAhead, fetched};

/// One module of a pass of streamed modules ([`Streamed::pass`]): the module and a handle on
/// the pass.
#[derive(Debug)]
pub struct Streamed<M> {
    module: Arc<M>,
    pass: Arc<Pass<M>>,
    index: usize,
}

/// The modules of one pass and the copies started ahead of their runs.
#[derive(Debug)]
struct Pass<M> {
    /// The modules, while a handle on them lives: the pass holds no handle on their tensors
    /// of its own, so that an optimizer can update a module's parameters in place once its
    /// last run is over.
    modules: Vec<Weak<M>>,
    /// Invariant: one per module; the copies of its weights started ahead, until it runs.
    started: Vec<Mutex<Option<WeightsAhead>>>,
    /// Invariant: one per module; whether it has run once (its later runs are the backward
    /// pass's recomputation).
    ran: Vec<AtomicBool>,
    /// Whether a module's run starts the copies of the next one's weights.
    ahead: bool,
}

impl<M: Module + Clone> Streamed<M> {
    /// `modules` as one pass, in the order the forward pass runs them, each fetching the next
    /// one's weights as it runs where `ahead` (else each module's copies start as it runs, the
    /// kernels waiting for them, and the device holds one module's weights at a time).
    pub fn pass(modules: &[M], ahead: bool) -> Vec<Streamed<M>> {
        let modules: Vec<Arc<M>> = modules.iter().cloned().map(Arc::new).collect();
        let pass = Arc::new(Pass {
            modules: modules.iter().map(Arc::downgrade).collect(),
            started: modules.iter().map(|_| Mutex::new(None)).collect(),
            ran: modules.iter().map(|_| AtomicBool::new(false)).collect(),
            ahead,
        });
        let handles = modules.into_iter().enumerate();
        handles
            .map(|(index, module)| Streamed {
                module,
                pass: Arc::clone(&pass),
                index,
            })
            .collect()
    }

    /// The module, its weights where they live.
    pub fn module(&self) -> &M {
        &self.module
    }

    /// Whether the pass fetches each module's weights one module ahead.
    pub fn ahead(&self) -> bool {
        self.pass.ahead
    }

    /// The module with its weights on `device` ([`fetched`]): the copies started ahead, or
    /// copies made now. Then the copies of the module that runs next start: the later one
    /// on the first run (the forward pass), the earlier one on a run after it (the backward
    /// pass runs the modules again in the reverse order).
    pub fn fetched(&self, device: &Device) -> Result<M> {
        let pass = &self.pass;
        let started = pass.started[self.index].lock().take();
        let module = match started {
            Some(ahead) => ahead.fetched(self.module())?,
            None => fetched(self.module(), device)?,
        };
        let next = match pass.ran[self.index].swap(true, Ordering::Relaxed) {
            _ if !pass.ahead => None,
            false => self.index.checked_add(1),
            true => self.index.checked_sub(1),
        };
        let next = next.and_then(|next| Some((next, pass.modules.get(next)?.upgrade()?)));
        if let Some((next, runs_next)) = next {
            let mut slot = pass.started[next].lock();
            if slot.is_none() {
                *slot = Some(WeightsAhead::start(&*runs_next, device)?);
            }
        }
        Ok(module)
    }
}

impl<M> Clone for Streamed<M> {
    fn clone(&self) -> Self {
        Self {
            module: Arc::clone(&self.module),
            pass: Arc::clone(&self.pass),
            index: self.index,
        }
    }
}
