//! What a data-parallel run does to keep its optimizer state sharded (ZeRO stage 1,
//! `optimizer.shard_state`). Each rank keeps the state of its share of the parameters
//! ([`StateShard`](headroom_nn::StateShard)) and updates those parameters alone, from the
//! gradients every rank summed. Then every parameter is broadcast from the rank that updated
//! it, so all ranks hold the same weights again; that is the all-gather of the updated weights,
//! one parameter at a time. A checkpoint gathers the state the same way, one buffer at a time,
//! into rank 0's host memory, so it holds every buffer in the form a run of one process
//! writes, and resumes on any number of ranks, sharded or not.

use headroom_dist::Collective;
use headroom_nn::Optimizer;
use headroom_nn::checkpoint::{HostArray, HostState};

use crate::error::{Error, Result};
use crate::trainable::TrainableModel;

/// Whether `optimizer` keeps only a share of the state, other ranks the rest.
pub fn is_sharded(optimizer: &dyn Optimizer) -> bool {
    optimizer.buffers().shard().ranks() > 1
}

/// Broadcasts each parameter of `model` from the rank that keeps its state to the others:
/// after an update of the sharded state, every rank holds every updated weight.
pub fn broadcast_from_owners(
    world: &mut dyn Collective,
    model: &mut dyn TrainableModel,
    optimizer: &dyn Optimizer,
) -> Result<()> {
    let shard = optimizer.buffers().shard();
    let mut index = 0;
    let mut failed = None;
    model.module_mut().visit_mut(&mut |_, param| {
        let owner = shard.owner(index).unwrap_or(0);
        index += 1;
        if failed.is_none()
            && let Err(err) = world.broadcast(param.array_mut(), owner)
        {
            failed = Some(err);
        }
        Ok(())
    })?;
    match failed {
        Some(err) => Err(err.into()),
        None => Ok(()),
    }
}

/// The whole state of a sharded `optimizer`, gathered from every rank: each buffer is
/// broadcast by the rank that keeps it, and rank 0 copies it to host memory. Every rank takes
/// part; rank 0 gets the state, the others none. Each rank holds at most one buffer it does not
/// keep at a time.
pub fn gather(
    world: &mut dyn Collective,
    model: &dyn TrainableModel,
    optimizer: &mut dyn Optimizer,
) -> Result<Option<HostState>> {
    let rank = world.rank();
    let mut buffers = Vec::new();
    let mut failed: Option<Error> = None;
    optimizer
        .buffers_mut()
        .share_buffers(model.module(), &mut |owner, name, array| {
            if failed.is_some() {
                return Ok(());
            }
            if let Err(err) = world.broadcast(array, owner) {
                failed = Some(err.into());
                return Ok(());
            }
            if rank == 0 {
                buffers.push((name.to_owned(), HostArray::of(array)?));
            }
            Ok(())
        })?;
    if let Some(err) = failed {
        return Err(err);
    }
    let steps = optimizer.steps();
    Ok((rank == 0).then_some(HostState { buffers, steps }))
}
