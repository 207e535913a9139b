//! A parameter sharded over ranks (ZeRO-3, FSDP): each rank keeps one flat chunk of it; where
//! it is used, the whole tensor is gathered from every rank, and its gradient is summed over
//! the ranks, each keeping its chunk's (a reduce-scatter).

use headroom_alloc::Tag;
use headroom_collectives::{Collective, ReduceOp, SharedWorld};
use headroom_kernels::ops::data::copy_range;
use headroom_kernels::{Array, Shape};

use super::rule;
use crate::error::{Error, Result};
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// The tensor of shape `whole` whose flat elements are the chunks every rank of `world`
    /// holds, in rank order; this tensor is this rank's chunk, `[whole.numel().div_ceil(ranks)]`,
    /// the last chunks padded. The gathered copy is tagged as weights, and a variable's is a
    /// variable. The gradient is summed over the ranks; each keeps its chunk's.
    pub fn gathered(&self, world: &SharedWorld, whole: &Shape) -> Result<Tensor> {
        let ranks = world.world_size();
        let numel = whole.numel();
        let chunk = numel.div_ceil(ranks);
        if self.dims() != [chunk] {
            return Err(Error::Argument {
                op: "gathered",
                detail: format!(
                    "a chunk of shape {} for a tensor of shape {whole} over {ranks} ranks: \
                     expected [{chunk}]",
                    self.shape()
                ),
            });
        }
        let device = self.device().clone();
        let full = {
            let _weights = device.scoped_tag(Tag::WEIGHTS);
            let mut all = Array::zeros(&device, [chunk * ranks], self.dtype())?;
            world.clone().all_gather(self.array(), &mut all)?;
            resized(&all, numel)?.reshape(whole.clone())?
        };
        let y = Tensor::output_variable(full, self.is_variable());
        if let Some(rec) = begin(&[self]) {
            let world = world.clone();
            let back = move |g: &Array, _: &[bool]| {
                let _gradients = device.scoped_tag(Tag::GRADIENTS);
                let padded = resized(g, chunk * ranks)?;
                let mut mine = Array::zeros(&device, [chunk], g.dtype())?;
                world
                    .clone()
                    .reduce_scatter(&padded, &mut mine, ReduceOp::Sum)?;
                Ok(vec![Some(mine)])
            };
            rec.finish("gathered", &[&y], saves(&[]), rule(back));
        }
        Ok(y)
    }
}

/// `x`'s elements, flat, cut or padded with zeros to `len`: `x` itself (reshaped) where it
/// holds `len`.
fn resized(x: &Array, len: usize) -> Result<Array> {
    if x.numel() == len {
        return Ok(x.reshape([len])?);
    }
    let mut out = Array::zeros(x.device(), [len], x.dtype())?;
    copy_range(x, 0, &mut out, 0, len.min(x.numel()))?;
    Ok(out)
}
