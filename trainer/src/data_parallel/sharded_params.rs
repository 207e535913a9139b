//! The checkpoint of a run whose parameters are sharded over the ranks (ZeRO stage 3,
//! `optimizer.shard_params`): every rank writes its own chunks of the model and of the
//! optimizer state, the ranks agree that every rank's file was written, and rank 0 then
//! commits the checkpoint with its index. It resumes on any number of ranks (each reads its
//! chunk of each tensor from the files that hold it) and exports as a run of one process does.

use std::path::Path;

use headroom_nn::checkpoint::{self, HostState, ShardIndex};
use headroom_nn::{Module, Optimizer, ParamShards};

use crate::data_parallel::agreement::agree_on_outcome;
use crate::data_parallel::peers::Peers;
use crate::error::Result;

/// Writes this rank's file of the checkpoint of `step` beside `index`, and once every rank of
/// `peers` has written its own, gives the index for rank 0 to commit (none on the other ranks).
/// Every rank calls it at the same step; a rank that could not write stops every rank, naming
/// it, and the last checkpoint stays as it was.
pub fn save_rank(
    index: &Path,
    step: u64,
    (model, shards): (&dyn Module, &ParamShards),
    optimizer: &dyn Optimizer,
    peers: &mut Peers<'_>,
) -> Result<Option<(ShardIndex, u64)>> {
    let written = HostState::of(optimizer).and_then(|state| {
        let made = checkpoint::save_rank(index, step, (model, shards), &state)?;
        Ok((made, state.steps))
    });
    let launch = peers.launch();
    let what = "an error writing its part of the checkpoint";
    let written = agree_on_outcome(peers, launch, (step, what), written.map_err(Into::into))?;
    Ok(launch.writes().then_some(written))
}
