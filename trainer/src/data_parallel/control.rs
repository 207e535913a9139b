//! The small buffer through which the ranks of a data-parallel run agree on a few numbers each
//! time (the batch's counts, what a round of micro-batches did, whether a bucket of gradients
//! could be formed, the loss). It is allocated once, when a rank joins its run, so agreeing
//! allocates nothing: an out-of-memory can strike a rank only in work the ranks agree about
//! afterwards, never between two of their collectives.

use headroom_alloc::Tag;
use headroom_collectives::{Collective, ReduceOp, SharedWorld};
use headroom_kernels::{Array, DType, Device};

use crate::error::Result;

/// The numbers one agreement carries.
pub type Values = [f64; 4];

/// A rank's control buffer.
#[derive(Debug)]
pub struct Control {
    /// Four f64 on the rank's device, held for the run.
    buffer: Array,
}

impl Control {
    /// The buffer of a rank on `device` (a planner's meta device allocates it as the rank does).
    pub fn new(device: &Device) -> Result<Self> {
        let _tag = device.scoped_tag(Tag::OTHER);
        Ok(Self {
            buffer: Array::zeros(device, [4], DType::F64)?,
        })
    }

    /// `values` reduced by `op` over the ranks of `world`.
    pub fn all_reduce(
        &mut self,
        world: &mut dyn Collective,
        values: Values,
        op: ReduceOp,
    ) -> Result<Values> {
        self.buffer.write_host(&values)?;
        world.all_reduce(&mut self.buffer, op)?;
        let mut agreed = [0.0; 4];
        agreed.copy_from_slice(&self.buffer.to_host::<f64>()?);
        Ok(agreed)
    }
}

/// The handle a model with sharded parameters runs its collectives through: one that agrees
/// on each with the other ranks first ([`SharedWorld::agreeing`]), so that a rank whose pass
/// stops at an out-of-memory stops the others' passes with its round's agreement. Its buffer
/// is tagged as the control buffer is, and a planned rank allocates it as the rank does.
pub fn agreeing(world: &SharedWorld) -> Result<SharedWorld> {
    let _tag = world.device().scoped_tag(Tag::OTHER);
    Ok(world.agreeing()?)
}
