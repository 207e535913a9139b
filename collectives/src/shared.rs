//! One world called by several owners in turn: a trainer and the sharded model it trains
//! both run collectives on the same ranks, one after the other on each rank.
//!
//! The model's handle can be an agreeing one ([`SharedWorld::agreeing`]): before each of its
//! collectives the ranks all-reduce four zeros, so that a rank which stops its pass (an
//! out-of-memory between two collectives) and says so in an all-reduce of the same shape
//! through the trainer's handle stops the others at their next collective, instead of leaving
//! them waiting in one it will never join.

use std::sync::Arc;

use headroom_kernels::{Array, DType, Device, DeviceKind};
use parking_lot::Mutex;

use crate::{Collective, Error, ReduceOp, Result};

/// What a rank that stops its pass sends, reduced by the largest over the ranks: four numbers
/// of the caller's meaning, at least one of them not zero.
pub type Stop = [f64; 4];

/// A handle on a world that its clones share: each collective locks it for its run. Every
/// rank must still call the same collectives in the same order through all its handles.
#[derive(Clone)]
pub struct SharedWorld {
    world: Arc<Mutex<Box<dyn Collective + Send>>>,
    /// The world's device, kept beside it so that [`Collective::device`] needs no lock.
    device: Device,
    rank: usize,
    size: usize,
    /// Where set, each collective of this handle is agreed on first.
    agreement: Option<Arc<Mutex<Agreement>>>,
}

/// The buffer an agreeing handle agrees through, and what stopped it last.
struct Agreement {
    /// Four f64 on the world's device, allocated once so that agreeing allocates nothing.
    buffer: Array,
    /// The values of the last agreement that stopped a collective, until taken.
    stop: Option<Stop>,
}

impl SharedWorld {
    /// A shared handle on `world`.
    pub fn new(world: Box<dyn Collective + Send>) -> Self {
        Self {
            device: world.device().clone(),
            rank: world.rank(),
            size: world.world_size(),
            world: Arc::new(Mutex::new(world)),
            agreement: None,
        }
    }

    /// A handle on the same world whose every collective the ranks first agree to run: an
    /// all-reduce (the largest) of four zeros, through a buffer allocated here on the world's
    /// device. Where a rank instead sends a [`Stop`] through another handle, the collective is
    /// not run and fails with [`Error::Stopped`]; [`SharedWorld::take_stop`] then gives the
    /// agreed values. A world of one rank, or a planned one, has nothing to agree on.
    pub fn agreeing(&self) -> Result<Self> {
        let agreement = match self.size > 1 {
            true => Some(Arc::new(Mutex::new(Agreement {
                buffer: Array::zeros(&self.device, [4], DType::F64)?,
                stop: None,
            }))),
            false => None,
        };
        Ok(Self {
            agreement,
            ..self.clone()
        })
    }

    /// The values another rank stopped this handle's last collective with, once: none where
    /// no collective was stopped since the last call.
    pub fn take_stop(&self) -> Option<Stop> {
        self.agreement.as_ref().and_then(|a| a.lock().stop.take())
    }

    /// Runs `collective` on the world once the ranks agree that none has stopped.
    fn agreed<T>(
        &self,
        op: &'static str,
        collective: impl FnOnce(&mut dyn Collective) -> Result<T>,
    ) -> Result<T> {
        let mut world = self.world.lock();
        if let Some(agreement) = &self.agreement
            && self.device.kind() != DeviceKind::Meta
        {
            let mut agreement = agreement.lock();
            agreement.buffer.write_host(&[0.0f64; 4])?;
            world.all_reduce(&mut agreement.buffer, ReduceOp::Max)?;
            let agreed = agreement.buffer.to_host::<f64>()?;
            if agreed.iter().any(|&v| v != 0.0) {
                let mut stop = [0.0; 4];
                stop.copy_from_slice(&agreed);
                agreement.stop = Some(stop);
                return Err(Error::Stopped {
                    op,
                    rank: self.rank,
                    world: self.size,
                });
            }
        }
        collective(&mut **world)
    }
}

impl std::fmt::Debug for SharedWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let agreeing = if self.agreement.is_some() {
            ", agreeing"
        } else {
            ""
        };
        write!(
            f,
            "SharedWorld(rank {} of {}{agreeing})",
            self.rank, self.size
        )
    }
}

impl Collective for SharedWorld {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.size
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn all_reduce(&mut self, array: &mut Array, op: ReduceOp) -> Result<()> {
        self.agreed("all_reduce", |world| world.all_reduce(array, op))
    }

    fn reduce_scatter(&mut self, input: &Array, output: &mut Array, op: ReduceOp) -> Result<()> {
        self.agreed("reduce_scatter", |world| {
            world.reduce_scatter(input, output, op)
        })
    }

    fn all_gather(&mut self, input: &Array, output: &mut Array) -> Result<()> {
        self.agreed("all_gather", |world| world.all_gather(input, output))
    }

    fn broadcast(&mut self, array: &mut Array, root: usize) -> Result<()> {
        self.agreed("broadcast", |world| world.broadcast(array, root))
    }

    fn barrier(&mut self) -> Result<()> {
        self.agreed("barrier", |world| world.barrier())
    }
}
