//! The ranks a step shares its work with, as the step sees them: the world it sums over and
//! the buffer the ranks agree through, neither of which a run of one process has.

use headroom_collectives::{Collective, ReduceOp};

use crate::data_parallel::control::{Control, Values};
use crate::data_parallel::world::Launch;
use crate::error::Result;

/// A step's world and the buffer its ranks agree through.
#[derive(Default)]
pub struct Peers<'a> {
    /// The ranks of a data-parallel run; none for a run of one process.
    pub world: Option<&'a mut dyn Collective>,
    /// The buffer the ranks agree through (with a world of several ranks).
    pub control: Option<&'a mut Control>,
}

impl Peers<'_> {
    /// `values` reduced by `op` over the ranks; this process's own in a run of one process.
    pub(crate) fn agree(&mut self, values: Values, op: ReduceOp) -> Result<Values> {
        match (self.world.as_deref_mut(), self.control.as_deref_mut()) {
            (Some(world), Some(control)) if world.world_size() > 1 => {
                control.all_reduce(world, values, op)
            }
            _ => Ok(values),
        }
    }

    /// Where this process stands among the ranks of its run.
    pub(crate) fn launch(&self) -> Launch {
        self.world.as_deref().map_or(Launch::ALONE, Launch::of)
    }
}
