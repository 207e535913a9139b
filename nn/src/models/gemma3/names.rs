//! Where each of a Gemma 3 [`Gpt`](crate::Gpt)'s parameters lives in a Hugging Face
//! checkpoint: Llama's layout, with four norms a block.

use crate::models::llama::names::layout_names;

/// Gemma 3's block norms: the model's module and the checkpoint's.
const NORMS: [(&str, &str); 4] = [
    ("ln1", "input_layernorm"),
    ("post_attn", "post_attention_layernorm"),
    ("ln2", "pre_feedforward_layernorm"),
    ("post_mlp", "post_feedforward_layernorm"),
];

/// The checkpoint's tensors that fill the model's parameter `name`, stacked along the first
/// axis; none when Gemma 3 has no such parameter.
pub(crate) fn hf_names(name: &str) -> Option<Vec<String>> {
    layout_names(name, &NORMS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_has_four_norms_under_gemma_names() {
        let one = |name: &str| hf_names(name).unwrap().join(",");
        assert_eq!(
            one("blocks.2.ln1.weight"),
            "model.layers.2.input_layernorm.weight"
        );
        assert_eq!(
            one("blocks.2.post_attn.weight"),
            "model.layers.2.post_attention_layernorm.weight"
        );
        assert_eq!(
            one("blocks.2.ln2.weight"),
            "model.layers.2.pre_feedforward_layernorm.weight"
        );
        assert_eq!(
            one("blocks.2.post_mlp.weight"),
            "model.layers.2.post_feedforward_layernorm.weight"
        );
        assert_eq!(
            one("blocks.0.attn.q_norm.weight"),
            "model.layers.0.self_attn.q_norm.weight"
        );
        assert_eq!(one("tok_emb.weight"), "model.embed_tokens.weight");
        assert_eq!(hf_names("blocks.0.ln1.bias"), None);
    }
}
