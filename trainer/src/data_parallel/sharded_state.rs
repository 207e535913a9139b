//! What a data-parallel run does to keep its optimizer state sharded (ZeRO stage 1,
//! `optimizer.shard_state`). Each rank keeps the state of its share of the parameters
//! ([`StateShard`](headroom_nn::StateShard)) and updates those parameters alone, from the
//! gradients every rank summed. Then every parameter is broadcast from the rank that updated
//! it, so all ranks hold the same weights again; that is the all-gather of the updated weights,
//! one parameter at a time. A checkpoint gathers the state the same way, one buffer at a time,
//! into rank 0's host memory, so it holds every buffer in the form a run of one process
//! writes, and resumes on any number of ranks, sharded or not.

use headroom_collectives::{Collective, ReduceOp};
use headroom_nn::checkpoint::{HostArray, HostState};
use headroom_nn::{Optimizer, Shared};

use crate::data_parallel::control::Control;
use crate::error::{Error, Result};
use crate::model::TrainableModel;

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
    model.module_mut().visit_parameters_mut(&mut |_, param| {
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
/// part; rank 0 gets the state, the others none. Each rank holds at most one parameter's buffers
/// it does not keep at a time, and the ranks agree through `control` that every rank found room
/// for them before each broadcast: a rank without room stops every rank, naming it.
pub fn gather(
    world: &mut dyn Collective,
    control: &mut Control,
    model: &dyn TrainableModel,
    optimizer: &mut dyn Optimizer,
) -> Result<Option<HostState>> {
    let (rank, steps) = (world.rank(), optimizer.steps());
    let mut buffers = Vec::new();
    optimizer
        .buffers_mut()
        .share_buffers(model.module(), &mut |owner, name, buffer| {
            if let Some(copy) = share(world, control, (rank, owner, steps), name, buffer)? {
                buffers.push((name.to_owned(), copy));
            }
            Ok::<(), Error>(())
        })?;
    Ok((rank == 0).then_some(HostState { buffers, steps }))
}

/// One buffer of the gather: agreed on, broadcast from `owner`, and copied to host memory on
/// rank 0.
fn share(
    world: &mut dyn Collective,
    control: &mut Control,
    (rank, owner, steps): (usize, usize, u64),
    name: &str,
    buffer: Shared<'_>,
) -> Result<Option<HostArray>> {
    let no_room = match &buffer {
        Shared::Here(_) => 0.0,
        Shared::NoRoom(_) => rank as f64 + 1.0,
    };
    let agreed = control.all_reduce(world, [no_room, 0.0, 0.0, 0.0], ReduceOp::Max)?;
    let array = match buffer {
        Shared::NoRoom(err) => {
            return Err(Error::config(format!(
                "checkpoint at step {steps}: no room on this rank (rank {rank}) to receive \
                 `{name}` of the sharded optimizer state: {err}"
            )));
        }
        Shared::Here(_) if agreed[0] > 0.0 => {
            return Err(Error::PeerFailed {
                step: steps,
                rank: agreed[0] as usize - 1,
                what: "no room to receive the optimizer state for a checkpoint",
            });
        }
        Shared::Here(array) => array,
    };
    world.broadcast(array, owner)?;
    Ok(if rank == 0 {
        Some(HostArray::of(array)?)
    } else {
        None
    })
}
