//! The weights of a GPT's blocks stored quantized (QLoRA's frozen base), by name: what a loader
//! fills and what the counts of frozen scalars add.

use headroom_kernels::ops::quant::Quantized;

use crate::layers::block::Block;
use crate::layers::block_mlp::MlpKind;
use crate::layers::gpt::Gpt;
use crate::layers::linear::Linear;
use crate::layers::linear_weight::Weight;

impl Block {
    /// Its linear layers with their names under the block (`attn.qkv`, `mlp.down`), in
    /// visiting order.
    pub fn linears_mut(&mut self) -> Vec<(&'static str, &mut Linear)> {
        let mut out = vec![
            ("attn.qkv", &mut self.attn.qkv),
            ("attn.proj", &mut self.attn.proj),
        ];
        match &mut self.mlp.kind {
            MlpKind::Gelu { fc, proj } => out.extend([("mlp.fc", fc), ("mlp.proj", proj)]),
            MlpKind::SwiGlu { gate, up, down } => {
                out.extend([("mlp.gate", gate), ("mlp.up", up), ("mlp.down", down)])
            }
        }
        out
    }
}

impl Gpt {
    /// Each weight stored quantized, named as its tensor would be (`blocks.0.mlp.up.weight`),
    /// in visiting order.
    pub fn quantized_weights_mut(&mut self) -> Vec<(String, &mut Quantized)> {
        let mut out = Vec::new();
        for (i, block) in self.blocks.iter_mut().enumerate() {
            for (name, layer) in block.linears_mut() {
                if let Weight::Quantized(stored) = &mut layer.weight {
                    out.push((format!("blocks.{i}.{name}.weight"), &mut **stored));
                }
            }
        }
        out
    }
}

/// Scalars of `gpt`'s weights stored quantized.
pub(crate) fn quantized_count(gpt: &Gpt) -> usize {
    let layers = gpt.blocks.iter().flat_map(|block| {
        let mlp: Vec<&Linear> = match &block.mlp.kind {
            MlpKind::Gelu { fc, proj } => vec![fc, proj],
            MlpKind::SwiGlu { gate, up, down } => vec![gate, up, down],
        };
        [&block.attn.qkv, &block.attn.proj].into_iter().chain(mlp)
    });
    layers
        .filter_map(|layer| layer.weight.quantized())
        .map(Quantized::numel)
        .sum()
}
