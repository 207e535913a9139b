//! An embedding whose table is sharded over ranks: the lookup gathers the table and lets it
//! go, and the gradient of each rank's chunk is formed from every rank's ids and output
//! gradients, gathered, where they are fewer than the table's rows; never the whole table's
//! gradient, which is nearly all zeros.

use headroom_alloc::Tag;
use headroom_collectives::{Collective, SharedWorld};
use headroom_kernels::ops::index::{self, embedding_backward_rows};
use headroom_kernels::{Array, Shape};

use super::rule;
use super::sharded::{every_rank, reduce_scattered, whole_of, window};
use crate::error::{Error, Result};
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// Rows of the `[V, D]` table of shape `whole` picked by `ids` (U32), this tensor being
    /// this rank's chunk of it as [`Tensor::gathered`] takes it. Every rank of `world` must
    /// call it at the same point with as many ids. Keeps the ids.
    pub fn sharded_embedding(
        &self,
        ids: &Tensor,
        world: &SharedWorld,
        whole: &Shape,
    ) -> Result<Tensor> {
        let &[vocab, dim] = whole.dims() else {
            return Err(Error::Argument {
                op: "sharded_embedding",
                detail: format!("the table {whole} must be [vocab, dim]"),
            });
        };
        let chunk = self.checked_chunk("sharded_embedding", world, whole)?;
        let table = whole_of(world, self.array(), whole)?;
        let y = Tensor::output(index::embedding(&table, ids.array())?);
        drop(table);
        if let Some(rec) = begin(&[self]) {
            let (saved, world) = (ids.array().clone(), world.clone());
            let ids = saved.clone();
            let back = move |g: &Array, _: &[bool]| {
                let _gradients = g.device().scoped_tag(Tag::GRADIENTS);
                let share = Share {
                    world: &world,
                    vocab,
                    dim,
                    chunk,
                };
                Ok(vec![Some(share.gradient(&ids, g)?)])
            };
            rec.finish("sharded_embedding", &[&y], saves(&[&saved]), rule(back));
        }
        Ok(y)
    }
}

/// One rank's chunk of a sharded `[vocab, dim]` table, for its gradient.
struct Share<'a> {
    world: &'a SharedWorld,
    vocab: usize,
    dim: usize,
    chunk: usize,
}

impl Share<'_> {
    /// The chunk's gradient, the sum over the ranks of the rows of their `dy` at their `ids`.
    fn gradient(&self, ids: &Array, dy: &Array) -> Result<Array> {
        let ranks = self.world.world_size();
        let looked_up = ids.numel() * ranks;
        // The rows every rank looked up cost `looked_up` rows to gather; the whole gradient
        // costs the table's rows, less this rank's chunk of them.
        if looked_up >= self.vocab - self.vocab / ranks {
            let whole = index::embedding_backward(ids, dy, self.vocab)?;
            return reduce_scattered(self.world, &whole, self.chunk);
        }
        let all_ids = every_rank(self.world, ids)?;
        let all_dy = every_rank(self.world, dy)?.reshape([looked_up, self.dim])?;
        // The table's rows that this rank's flat chunk of elements overlaps.
        let start = (self.world.rank() * self.chunk).min(self.vocab * self.dim);
        let end = (start + self.chunk).min(self.vocab * self.dim);
        let dim = self.dim.max(1);
        let rows = start / dim..end.div_ceil(dim);
        let first = rows.start * dim;
        let part = embedding_backward_rows(&all_ids, &all_dy, self.vocab, rows)?;
        Ok(window(&part, start - first, self.chunk)?)
    }
}
