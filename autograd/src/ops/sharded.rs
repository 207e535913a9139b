//! A parameter sharded over ranks (ZeRO-3, FSDP): each rank keeps one flat chunk of it; where
//! it is used, the whole tensor is gathered from every rank, and its gradient is summed over
//! the ranks, each keeping its chunk's (a reduce-scatter).

use headroom_alloc::Tag;
use headroom_collectives::{Collective, ReduceOp, SharedWorld};
pub(super) use headroom_kernels::ops::data::window;
use headroom_kernels::{Array, DType, Shape};

use super::{in_dtype, rule};
use crate::again::Again;
use crate::error::{Error, Result};
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// The tensor of shape `whole` whose flat elements are the chunks every rank of `world`
    /// holds, in rank order, gathered in `dtype` (a half type halves what moves and what is
    /// held: FSDP's mixed precision); this tensor is this rank's chunk,
    /// `[whole.numel().div_ceil(ranks)]`, the last chunks padded. The gathered copy is tagged as
    /// weights, and a variable's is a variable. The gradient is summed over the ranks in this
    /// tensor's dtype; each keeps its chunk's.
    pub fn gathered(&self, world: &SharedWorld, whole: &Shape, dtype: DType) -> Result<Tensor> {
        self.gathered_holding(world, (whole, dtype), true)
    }

    /// [`Tensor::gathered`], whose whole copy the backward rules that keep it do not hold:
    /// they gather it again from the ranks when they run (FSDP's resharding after the forward
    /// pass), so that between the passes the tape holds the chunk alone. Every rank runs the
    /// same rules in the same order, as every backward pass does.
    pub fn gathered_again_in_backward(
        &self,
        world: &SharedWorld,
        whole: &Shape,
        dtype: DType,
    ) -> Result<Tensor> {
        self.gathered_holding(world, (whole, dtype), false)
    }

    /// [`Tensor::gathered`] whose whole copy `full` was gathered from this chunk already and
    /// kept (ZeRO-2 keeps each copy until the chunks are updated): nothing moves now, and the
    /// gradient is summed into each rank's chunk as [`Tensor::gathered`]'s is.
    pub fn gathered_already(
        &self,
        world: &SharedWorld,
        whole: &Shape,
        full: Array,
    ) -> Result<Tensor> {
        let chunk = self.checked_chunk("gathered_already", world, whole)?;
        if full.shape() != whole {
            return Err(Error::Argument {
                op: "gathered_already",
                detail: format!("a copy of shape {} for {whole}", full.shape()),
            });
        }
        let y = Tensor::output_variable(full, self.is_variable());
        Ok(self.reduced_into_chunk(world, chunk, y))
    }

    /// [`Tensor::gathered`], the whole copy held by the rules that keep it where `hold`.
    fn gathered_holding(
        &self,
        world: &SharedWorld,
        (whole, dtype): (&Shape, DType),
        hold: bool,
    ) -> Result<Tensor> {
        let chunk = self.checked_chunk("gathered", world, whole)?;
        let full = whole_in(world, (self.array(), dtype), whole)?;
        let mut y = Tensor::output_variable(full, self.is_variable());
        if !hold {
            let (world, mine, whole) = (world.clone(), self.array().clone(), whole.clone());
            y = y.formed_again_by(Again::new(move || whole_in(&world, (&mine, dtype), &whole)));
        }
        Ok(self.reduced_into_chunk(world, chunk, y))
    }

    /// `y`, the whole tensor gathered from this chunk of `chunk` elements, recorded where a
    /// tape records so that its gradient is summed over `world`, each rank keeping its chunk's.
    fn reduced_into_chunk(&self, world: &SharedWorld, chunk: usize, y: Tensor) -> Tensor {
        if let Some(rec) = begin(&[self]) {
            let (world, device) = (world.clone(), self.device().clone());
            let own = self.dtype();
            let back = move |g: &Array, _: &[bool]| {
                let _gradients = device.scoped_tag(Tag::GRADIENTS);
                Ok(vec![Some(reduce_scattered(
                    &world,
                    &in_dtype(g, own)?,
                    chunk,
                )?)])
            };
            // Reduce-scattered as soon as the gradient is whole, not after the rest of the
            // block's rules: a block holds one whole gradient at a time.
            rec.eager()
                .finish("gathered", &[&y], saves(&[]), rule(back));
        }
        y
    }
}

impl Tensor {
    /// The elements of each rank's chunk of a tensor of shape `whole` over `world`, which this
    /// tensor must hold (an [`Error::Argument`] for `op` otherwise).
    pub(super) fn checked_chunk(
        &self,
        op: &'static str,
        world: &SharedWorld,
        whole: &Shape,
    ) -> Result<usize> {
        let ranks = world.world_size();
        let chunk = chunk_len(whole.numel(), ranks);
        if self.dims() != [chunk] {
            return Err(Error::Argument {
                op,
                detail: format!(
                    "a chunk of shape {} for a tensor of shape {whole} over {ranks} ranks: \
                     expected [{chunk}]",
                    self.shape()
                ),
            });
        }
        Ok(chunk)
    }
}

/// This rank's chunk, of `chunk` elements, of the sum over the ranks of `world` of the whole
/// `g` each holds.
pub(super) fn reduce_scattered(world: &SharedWorld, g: &Array, chunk: usize) -> Result<Array> {
    let padded = window(g, 0, chunk * world.world_size())?;
    let mut mine = Array::zeros(g.device(), [chunk], g.dtype())?;
    world
        .clone()
        .reduce_scatter(&padded, &mut mine, ReduceOp::Sum)?;
    Ok(mine)
}

/// The tensor of shape `whole` gathered in `dtype` from every rank of `world`, `mine` being
/// this rank's chunk, tagged as weights.
fn whole_in(world: &SharedWorld, (mine, dtype): (&Array, DType), whole: &Shape) -> Result<Array> {
    let cast = {
        let _weights = mine.device().scoped_tag(Tag::WEIGHTS);
        in_dtype(mine, dtype)?
    };
    whole_of(world, &cast, whole)
}

/// The tensor of shape `whole` gathered from every rank of `world`, `mine` being this rank's
/// chunk, tagged as weights.
pub(super) fn whole_of(world: &SharedWorld, mine: &Array, whole: &Shape) -> Result<Array> {
    let _weights = mine.device().scoped_tag(Tag::WEIGHTS);
    let all = every_rank(world, mine)?;
    Ok(window(&all, 0, whole.numel())?.reshape(whole.clone())?)
}

/// Every rank's `mine` of `world`, flat, in rank order: `[ranks * mine.numel()]`. Every rank
/// gives as many elements.
pub fn every_rank(world: &SharedWorld, mine: &Array) -> Result<Array> {
    let (device, len) = (mine.device(), mine.numel());
    let mut all = Array::zeros(device, [len * world.world_size()], mine.dtype())?;
    world.clone().all_gather(&mine.reshape([len])?, &mut all)?;
    Ok(all)
}

/// Chunk `rank` of `ranks` of `x`'s elements, flat, as [`Tensor::gathered`] takes it:
/// `[x.numel().div_ceil(ranks)]`, zeros past the end of `x`.
pub fn chunk_of(x: &Array, rank: usize, ranks: usize) -> Result<Array> {
    let chunk = chunk_len(x.numel(), ranks);
    Ok(window(x, rank * chunk, chunk)?)
}

/// The elements of each rank's chunk of a tensor of `numel` over `ranks`.
pub(super) fn chunk_len(numel: usize, ranks: usize) -> usize {
    numel.div_ceil(ranks.max(1))
}
