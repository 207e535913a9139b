//! What every family assembles its blocks with: the shape they share, and drawing them on
//! the device or its host tier.

use headroom_kernels::Device;

use crate::error::Result;
use crate::init::Initializer;
use crate::layers::block::Block;
use crate::layers::norm::Norm;

/// The parts of a decoder a family assembles: its blocks and its final norm.
pub(crate) type Assembled = (Vec<Block>, Norm);

/// The shape every family's blocks take from the decoder's configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockShape {
    /// Features per position.
    pub width: usize,
    /// Attention (query) heads.
    pub heads: usize,
    /// Blocks.
    pub layers: usize,
    /// Dropout on attention weights and residual branches.
    pub dropout: f64,
}

impl BlockShape {
    /// The std of the projections into the residual stream, GPT-2's `0.02 / sqrt(2 * layers)`.
    pub fn proj_std(&self) -> f64 {
        0.02 / ((2 * self.layers) as f64).sqrt()
    }
}

/// `layers` blocks drawn by `block` (given each block's index), on `host` when given, the
/// initializer's device again after; each cut to a rank's chunks as soon as it is drawn where
/// the initializer cuts ([`Initializer::drawn`]).
pub(crate) fn draw_blocks(
    init: &mut Initializer,
    layers: usize,
    host: Option<&Device>,
    block: &dyn Fn(&mut Initializer, usize) -> Result<Block>,
) -> Result<Vec<Block>> {
    let device = init.device().clone();
    init.set_device(host.unwrap_or(&device));
    let blocks = (0..layers)
        .map(|i| {
            let mut drawn = block(init, i)?;
            init.drawn(&format!("blocks.{i}"), &mut drawn)?;
            Ok(drawn)
        })
        .collect::<Result<Vec<_>>>();
    init.set_device(&device);
    blocks
}
