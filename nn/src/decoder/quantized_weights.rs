//! The weights of a GPT stored quantized (QLoRA's frozen base: the blocks' linear layers and
//! an untied token embedding), by name: what a loader fills.

use headroom_kernels::ops::quant::Quantized;

use crate::decoder::Gpt;
use crate::layers::linear_weight::Weight;

impl Gpt {
    /// Each weight stored quantized, named as its tensor would be (`blocks.0.mlp.up.weight`),
    /// in visiting order.
    pub fn quantized_weights_mut(&mut self) -> Vec<(String, &mut Quantized)> {
        let mut out = Vec::new();
        if let Weight::Quantized(stored) = &mut self.tok_emb.weight {
            out.push(("tok_emb.weight".to_owned(), &mut **stored));
        }
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
