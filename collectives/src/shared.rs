//! One world called by several owners in turn: a trainer and the sharded model it trains
//! both run collectives on the same ranks, one after the other on each rank.

use std::sync::Arc;

use headroom_kernels::{Array, Device};
use parking_lot::Mutex;

use crate::{Collective, ReduceOp, Result};

/// A handle on a world that its clones share: each collective locks it for its run. Every
/// rank must still call the same collectives in the same order through all its handles.
#[derive(Clone)]
pub struct SharedWorld {
    world: Arc<Mutex<Box<dyn Collective + Send>>>,
    /// The world's device, kept beside it so that [`Collective::device`] needs no lock.
    device: Device,
    rank: usize,
    size: usize,
}

impl SharedWorld {
    /// A shared handle on `world`.
    pub fn new(world: Box<dyn Collective + Send>) -> Self {
        Self {
            device: world.device().clone(),
            rank: world.rank(),
            size: world.world_size(),
            world: Arc::new(Mutex::new(world)),
        }
    }
}

impl std::fmt::Debug for SharedWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedWorld(rank {} of {})", self.rank, self.size)
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
        self.world.lock().all_reduce(array, op)
    }

    fn reduce_scatter(&mut self, input: &Array, output: &mut Array, op: ReduceOp) -> Result<()> {
        self.world.lock().reduce_scatter(input, output, op)
    }

    fn all_gather(&mut self, input: &Array, output: &mut Array) -> Result<()> {
        self.world.lock().all_gather(input, output)
    }

    fn broadcast(&mut self, array: &mut Array, root: usize) -> Result<()> {
        self.world.lock().broadcast(array, root)
    }

    fn barrier(&mut self) -> Result<()> {
        self.world.lock().barrier()
    }
}
