//! How GPT-2 assembles its blocks from the shared layers.

use headroom_kernels::Device;

use crate::error::Result;
use crate::init::Initializer;
use crate::layers::activation::DropoutCounter;
use crate::layers::block::Block;
use crate::layers::layer_norm::LayerNorm;
use crate::layers::norm::Norm;
use crate::models::assembly::{Assembled, BlockShape, draw_blocks};

/// GPT-2's blocks and final LayerNorm; the projections into the residual stream drawn with
/// std `0.02 / sqrt(2 * layers)`.
pub(crate) fn assemble(
    init: &mut Initializer,
    shape: &BlockShape,
    counter: &DropoutCounter,
    host: Option<&Device>,
) -> Result<Assembled> {
    let (c, heads, p) = (shape.width, shape.heads, shape.dropout);
    let proj_std = shape.proj_std();
    let blocks = draw_blocks(init, shape.layers, host, &|init, _| {
        Block::new(init, c, heads, proj_std, (p, counter))
    })?;
    Ok((blocks, Norm::Layer(LayerNorm::new(init, c)?)))
}
