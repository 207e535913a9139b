//! How Gemma 3 assembles its blocks from the shared layers.

use headroom_kernels::Device;

use crate::error::Result;
use crate::init::Initializer;
use crate::layers::activation::DropoutCounter;
use crate::layers::attention::CausalSelfAttention;
use crate::layers::block::Block;
use crate::layers::block_mlp::{BlockMlp, GateActivation};
use crate::layers::norm::Norm;
use crate::layers::rms_norm::RmsNorm;
use crate::layers::rotary::RotaryEmbedding;
use crate::models::assembly::{Assembled, BlockShape, draw_blocks};
use crate::models::gemma3::options::Gemma3Options;

/// Gemma 3's blocks and final norm; the projections into the residual stream drawn with std
/// `0.02 / sqrt(2 * layers)`, the norms' weights zeros (a scale of one).
pub(crate) fn assemble(
    init: &mut Initializer,
    shape: &BlockShape,
    options: &Gemma3Options,
    counter: &DropoutCounter,
    host: Option<&Device>,
) -> Result<Assembled> {
    let (c, heads, p) = (shape.width, shape.heads, shape.dropout);
    let proj_std = shape.proj_std();
    let eps = options.norm_eps;
    // The rotary tables stay on the device: every block reads one of the two.
    let d = options.head_dim;
    let local = RotaryEmbedding::new(init, d, options.rope_local_theta, None)?;
    let global = RotaryEmbedding::new(init, d, options.rope_theta, None)?;
    let blocks = draw_blocks(init, shape.layers, host, &|init, i| {
        let norm = |init: &mut Initializer| RmsNorm::new_unit_offset(init, c, eps).map(Norm::Rms);
        let rotary = match options.is_sliding(i) {
            true => &local,
            false => &global,
        };
        let ln1 = norm(init)?;
        let attention = options.attention(i);
        let attn = CausalSelfAttention::grouped(
            init,
            (c, heads),
            &attention,
            rotary,
            proj_std,
            (p, counter),
        )?;
        let post_attn = norm(init)?;
        let ln2 = norm(init)?;
        let inner = (c, options.mlp_width);
        let mlp = BlockMlp::gated(
            init,
            inner,
            GateActivation::GeluTanh,
            proj_std,
            (p, counter),
        )?;
        let post_mlp = norm(init)?;
        Ok(Block::of(ln1, attn, ln2, mlp).with_post_norms(post_attn, post_mlp))
    })?;
    Ok((blocks, Norm::Rms(RmsNorm::new_unit_offset(init, c, eps)?)))
}
