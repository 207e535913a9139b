//! How the Llama family assembles its blocks from the shared layers.

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
use crate::models::llama::options::LlamaOptions;

/// The blocks and final RMSNorm of a Llama-family model; the projections into the residual
/// stream drawn with std `0.02 / sqrt(2 * layers)`.
pub(crate) fn assemble(
    init: &mut Initializer,
    shape: &BlockShape,
    options: &LlamaOptions,
    counter: &DropoutCounter,
    host: Option<&Device>,
) -> Result<Assembled> {
    let (c, heads, p) = (shape.width, shape.heads, shape.dropout);
    let proj_std = shape.proj_std();
    let eps = options.norm_eps;
    // The rotary tables stay on the device: every block reads them.
    let rotary = RotaryEmbedding::new(
        init,
        options.head_dim,
        options.rope_theta,
        options.rope_scaling,
    )?;
    let attention = options.attention();
    let blocks = draw_blocks(init, shape.layers, host, &|init, _| {
        let ln1 = Norm::Rms(RmsNorm::new(init, c, eps)?);
        let attn = CausalSelfAttention::grouped(
            init,
            (c, heads),
            &attention,
            &rotary,
            proj_std,
            (p, counter),
        )?;
        let ln2 = Norm::Rms(RmsNorm::new(init, c, eps)?);
        let inner = (c, options.mlp_width);
        let mlp = BlockMlp::gated(init, inner, GateActivation::Silu, proj_std, (p, counter))?;
        Ok(Block::of(ln1, attn, ln2, mlp))
    })?;
    Ok((blocks, Norm::Rms(RmsNorm::new(init, c, eps)?)))
}
