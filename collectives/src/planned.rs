//! One rank of a world as a plan sees it: on a meta device, where arrays hold no values, each
//! collective checks its arguments as the real world's would and moves nothing, so that a
//! planner running a rank's step counts the memory that rank's collectives take. Each adds to
//! the planned time what a ring sends from a rank (NCCL's and MPI's algorithm for large
//! arrays): `(N - 1) / N` of the gathered or scattered array, twice that for an all-reduce, at
//! the meta device's link rate.

use headroom_kernels::{Array, Device, DeviceKind};

use crate::checks::{Chunks, chunked, reducible, root};
use crate::{Collective, Error, ReduceOp, Result};

/// Rank `rank` of `size` ranks, planned on a meta device.
pub struct PlannedRank {
    device: Device,
    rank: usize,
    size: usize,
}

impl PlannedRank {
    /// Rank `rank` of a world of `size`, its arrays on `device`, a meta device.
    pub fn new(device: &Device, rank: usize, size: usize) -> Result<Self> {
        let bad = |detail: String| {
            Err(Error::Argument {
                op: "PlannedRank::new",
                detail,
            })
        };
        if rank >= size {
            return bad(format!("rank {rank} of a world of {size}"));
        }
        if device.kind() != DeviceKind::Meta {
            return bad(format!(
                "{device} holds values: a planned rank runs on a meta device"
            ));
        }
        Ok(Self {
            device: device.clone(),
            rank,
            size,
        })
    }
}

impl PlannedRank {
    /// Plans a ring collective in which this rank sends `passes` times `(N - 1) / N` of
    /// `array`'s bytes.
    fn sends(&self, array: &Array, passes: f64) {
        let share = (self.size - 1) as f64 / self.size as f64;
        let bytes = (array.numel() * array.dtype().size()) as f64;
        self.device.plan_collective(passes * share * bytes);
    }
}

impl Collective for PlannedRank {
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
        reducible("all_reduce", op, array.dtype())?;
        self.sends(array, 2.0);
        Ok(())
    }

    fn reduce_scatter(&mut self, input: &Array, output: &mut Array, op: ReduceOp) -> Result<()> {
        chunked("reduce_scatter", input, output, Chunks::Input, self.size)?;
        reducible("reduce_scatter", op, input.dtype())?;
        self.sends(input, 1.0);
        Ok(())
    }

    fn all_gather(&mut self, input: &Array, output: &mut Array) -> Result<()> {
        chunked("all_gather", input, output, Chunks::Output, self.size)?;
        self.sends(output, 1.0);
        Ok(())
    }

    fn broadcast(&mut self, array: &mut Array, from: usize) -> Result<()> {
        root("broadcast", from, self.size)?;
        // A pipelined ring: the whole array over every link.
        if self.size > 1 {
            self.device
                .plan_collective((array.numel() * array.dtype().size()) as f64);
        }
        Ok(())
    }

    fn barrier(&mut self) -> Result<()> {
        Ok(())
    }
}
