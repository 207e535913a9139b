//! The checkpoint of a run whose parameters are sharded over the ranks (ZeRO stage 3,
//! `optimizer.shard_params`): every rank writes its own chunks of the model and of the
//! optimizer state, the ranks agree that every rank's file was written, and rank 0 then
//! commits the checkpoint with its index. It resumes on any number of ranks (each reads its
//! chunk of each tensor from the files that hold it) and exports as a run of one process does.

use std::path::Path;

use headroom_collectives::{Collective, ReduceOp};
use headroom_nn::checkpoint::{self, HostState, ShardIndex};
use headroom_nn::{Module, Optimizer, ParamShards};

use crate::data_parallel::control::Control;
use crate::error::{Error, Result};

/// Writes this rank's file of the checkpoint of `step` beside `index`, and once every rank of
/// `world` has written its own, gives the index for rank 0 to commit (none on the other ranks).
/// Every rank calls it at the same step; a rank that could not write stops every rank, naming
/// it, and the last checkpoint stays as it was.
pub fn save_rank(
    index: &Path,
    step: u64,
    (model, shards): (&dyn Module, &ParamShards),
    optimizer: &dyn Optimizer,
    (world, control): (&mut dyn Collective, Option<&mut Control>),
) -> Result<Option<(ShardIndex, u64)>> {
    let written = HostState::of(optimizer).and_then(|state| {
        let made = checkpoint::save_rank(index, step, (model, shards), &state)?;
        Ok((made, state.steps))
    });
    let failed = match &written {
        Ok(_) => 0.0,
        Err(_) => world.rank() as f64 + 1.0,
    };
    let agreed = match control {
        Some(control) => control.all_reduce(world, [failed, 0.0, 0.0, 0.0], ReduceOp::Max)?,
        None => [failed, 0.0, 0.0, 0.0],
    };
    let written = written?;
    if agreed[0] > 0.0 {
        return Err(Error::PeerFailed {
            step,
            rank: agreed[0] as usize - 1,
            what: "an error writing its part of the checkpoint",
        });
    }
    Ok((world.rank() == 0).then_some(written))
}
