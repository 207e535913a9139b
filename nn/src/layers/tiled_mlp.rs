//! A block's MLP sublayer over tiles of its rows of tokens (the tiled MLP of Arctic Long
//! Sequence Training): `mlp(norm(x))` one tile at a time, each tile a recomputed segment, so
//! that the MLP's wide intermediate (4x the width for GPT-2, three arrays of the inner width for
//! SwiGLU) exists for one tile at a time in the forward pass and in the backward pass. The
//! values and gradients equal the untiled sublayer's (each row's MLP reads that row alone); the
//! price is one more forward pass of the MLP.

use headroom_autograd::Tensor;

use crate::error::Result;
use crate::layers::block_mlp::BlockMlp;
use crate::layers::norm::Norm;
use crate::module::{Module, visit_child, visit_child_mut};
use crate::recomputed_modules::recomputed;

/// The norm before a block's MLP, the MLP and the norm after it if any: what one tile runs.
#[derive(Debug, Clone)]
pub(crate) struct MlpSublayer {
    pub(crate) norm: Norm,
    pub(crate) mlp: BlockMlp,
    pub(crate) post: Option<Norm>,
}

impl MlpSublayer {
    /// `mlp(norm(x))` (`x`: `[..., C]`) over tiles of at most `rows` rows of `x`'s flattened
    /// leading axes, joined back in order; a single tile where all of `x` fits one.
    pub(crate) fn tiled(&self, x: &Tensor, rows: usize) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let width = dims.last().copied().unwrap_or(1);
        let n = x.numel() / width.max(1);
        let count = n.div_ceil(rows.max(1));
        if count <= 1 {
            return self.forward(x);
        }
        let tiles = x.reshape([n, width])?.split(0, &tile_sizes(n, count))?;
        let counter = self.mlp.dropout.counter().clone();
        let outputs = tiles
            .iter()
            .map(|tile| recomputed(self, &counter, tile))
            .collect::<Result<Vec<_>>>()?;
        drop(tiles);
        let outputs: Vec<&Tensor> = outputs.iter().collect();
        Ok(Tensor::concat(&outputs, 0)?.reshape(dims)?)
    }
}

/// `n` rows cut into `count` tiles as even as can be, the larger ones first.
fn tile_sizes(n: usize, count: usize) -> Vec<usize> {
    (0..count)
        .map(|i| n / count + usize::from(i < n % count))
        .collect()
}

impl Module for MlpSublayer {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.norm.forward(x)?.for_matmul()?;
        let y = self.mlp.forward(&h)?;
        match &self.post {
            Some(post) => post.forward(&y),
            None => Ok(y),
        }
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        visit_child(&self.norm, "ln2", f);
        visit_child(&self.mlp, "mlp", f);
        if let Some(post) = &self.post {
            visit_child(post, "post_mlp", f);
        }
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        visit_child_mut(&mut self.norm, "ln2", f)?;
        visit_child_mut(&mut self.mlp, "mlp", f)?;
        match &mut self.post {
            Some(post) => visit_child_mut(post, "post_mlp", f),
            None => Ok(()),
        }
    }

    fn set_training(&mut self, training: bool) {
        self.mlp.set_training(training);
    }
}

#[cfg(test)]
mod tests {
    use super::tile_sizes;

    #[test]
    fn tiles_cover_the_rows_evenly_in_order() {
        assert_eq!(tile_sizes(10, 3), [4, 3, 3]);
        assert_eq!(tile_sizes(8, 4), [2, 2, 2, 2]);
        assert_eq!(tile_sizes(5, 5), [1; 5]);
    }
}
