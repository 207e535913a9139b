//! What a run whose parameters are sharded over the ranks (ZeRO stage 3,
//! `optimizer.shard_params`) does beside its model's passes, which gather and reduce-scatter
//! on their own: a checkpoint holds the whole model and the whole optimizer state, each
//! tensor and buffer gathered from every rank, so that it resumes on any number of ranks and
//! exports as a run of one process does.

use headroom_autograd::{Tensor, no_grad};
use headroom_collectives::Collective;
use headroom_nn::checkpoint::{HostArray, HostState};
use headroom_nn::{Optimizer, ParamShards};

use crate::error::{Error, Result};

/// The optimizer's state over sharded parameters, each buffer gathered whole from every rank
/// in its parameter's shape. Every rank takes part, one buffer at a time; rank 0 gets the
/// state, the others none.
pub fn gathered_state(
    shards: &ParamShards,
    optimizer: &dyn Optimizer,
) -> Result<Option<HostState>> {
    let _off = no_grad();
    let (named, steps) = optimizer.state();
    let writes = shards.world().rank() == 0;
    let mut buffers = Vec::new();
    for (name, chunk) in named {
        let param = name.rsplit_once('.').map(|(param, _)| param);
        let whole = param.and_then(|param| shards.whole_shape(param));
        let whole = whole.ok_or_else(|| {
            Error::config(format!(
                "checkpoint: the optimizer's buffer `{name}` belongs to no sharded parameter"
            ))
        })?;
        let chunk = Tensor::new(chunk);
        let gathered = chunk.gathered(shards.world(), whole, chunk.dtype())?;
        if writes {
            buffers.push((name, HostArray::of(gathered.array())?));
        }
    }
    Ok(writes.then_some(HostState { buffers, steps }))
}
