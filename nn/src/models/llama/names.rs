//! Where each of a Llama-family [`Gpt`](crate::Gpt)'s parameters lives in a Hugging Face
//! checkpoint: the same layout (`[out, in]` weights), other names, and the query, key and value
//! projections stored apart where the model fuses them.

/// The head's name.
pub(crate) const LM_HEAD: &str = "lm_head.weight";

/// The token embedding's name.
pub(crate) const EMBED: &str = "model.embed_tokens.weight";

/// The Llama family's block norms: the model's module and the checkpoint's.
const NORMS: [(&str, &str); 2] = [
    ("ln1", "input_layernorm"),
    ("ln2", "post_attention_layernorm"),
];

/// The checkpoint's tensors that fill the model's parameter `name`, in order, stacked along
/// the first axis (one tensor but for the fused `attn.qkv`); none when the family has no such
/// parameter.
pub(crate) fn hf_names(name: &str) -> Option<Vec<String>> {
    layout_names(name, &NORMS)
}

/// [`hf_names`] for a family laid out as Llama's but for its block norms, `norms` mapping the
/// model's norm modules to the checkpoint's.
pub(crate) fn layout_names(name: &str, norms: &[(&str, &str)]) -> Option<Vec<String>> {
    let one = |hf: &str| Some(vec![hf.to_owned()]);
    match name {
        "tok_emb.weight" => return one(EMBED),
        "ln_f.weight" => return one("model.norm.weight"),
        "head.weight" => return one(LM_HEAD),
        _ => {}
    }
    let rest = name.strip_prefix("blocks.")?;
    let (index, rest) = rest.split_once('.')?;
    let index: usize = index.parse().ok()?;
    let layer = format!("model.layers.{index}");
    let (module, kind) = rest.rsplit_once('.')?;
    if module == "attn.qkv" && matches!(kind, "weight" | "bias") {
        let part = |p: &str| format!("{layer}.self_attn.{p}_proj.{kind}");
        return Some(vec![part("q"), part("k"), part("v")]);
    }
    if let Some((_, hf)) = norms.iter().find(|(ours, _)| *ours == module) {
        return (kind == "weight").then(|| vec![format!("{layer}.{hf}.weight")]);
    }
    let hf = match module {
        "attn.q_norm" => "self_attn.q_norm",
        "attn.k_norm" => "self_attn.k_norm",
        "attn.proj" => "self_attn.o_proj",
        "mlp.gate" => "mlp.gate_proj",
        "mlp.up" => "mlp.up_proj",
        "mlp.down" => "mlp.down_proj",
        _ => return None,
    };
    (kind == "weight").then(|| vec![format!("{layer}.{hf}.weight")])
}

/// The tensors of a GGUF file (llama.cpp's names) that fill the model's parameter `name`, in
/// order, stacked along the first axis as [`hf_names`] gives them; none when the family has no
/// such parameter. The head's `output.weight` is absent from files whose head is tied.
pub(crate) fn gguf_names(name: &str) -> Option<Vec<String>> {
    let one = |gguf: &str| Some(vec![gguf.to_owned()]);
    match name {
        "tok_emb.weight" => return one("token_embd.weight"),
        "ln_f.weight" => return one("output_norm.weight"),
        "head.weight" => return one("output.weight"),
        _ => {}
    }
    let rest = name.strip_prefix("blocks.")?;
    let (index, rest) = rest.split_once('.')?;
    let index: usize = index.parse().ok()?;
    let (module, kind) = rest.rsplit_once('.')?;
    let block = format!("blk.{index}");
    if module == "attn.qkv" && matches!(kind, "weight" | "bias") {
        let part = |p: &str| format!("{block}.attn_{p}.{kind}");
        return Some(vec![part("q"), part("k"), part("v")]);
    }
    let gguf = match module {
        "ln1" => "attn_norm",
        "ln2" => "ffn_norm",
        "attn.q_norm" => "attn_q_norm",
        "attn.k_norm" => "attn_k_norm",
        "attn.proj" => "attn_output",
        "mlp.gate" => "ffn_gate",
        "mlp.up" => "ffn_up",
        "mlp.down" => "ffn_down",
        _ => return None,
    };
    (kind == "weight").then(|| vec![format!("{block}.{gguf}.weight")])
}

/// True for the buffers some checkpoints hold beside the weights (the rotary frequencies
/// `model.layers.{i}.self_attn.rotary_emb.inv_freq`): nothing to load, as the configuration
/// gives them.
pub(crate) fn is_buffer(key: &str) -> bool {
    key.ends_with(".rotary_emb.inv_freq")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_the_published_layout() {
        assert_eq!(
            hf_names("blocks.3.attn.qkv.bias").unwrap(),
            [
                "model.layers.3.self_attn.q_proj.bias",
                "model.layers.3.self_attn.k_proj.bias",
                "model.layers.3.self_attn.v_proj.bias"
            ]
        );
        assert_eq!(
            hf_names("blocks.0.mlp.down.weight").unwrap(),
            ["model.layers.0.mlp.down_proj.weight"]
        );
        assert_eq!(
            hf_names("blocks.1.attn.k_norm.weight").unwrap(),
            ["model.layers.1.self_attn.k_norm.weight"]
        );
        assert_eq!(hf_names("blocks.1.ln1.bias"), None);
        assert_eq!(
            gguf_names("blocks.3.attn.qkv.bias").unwrap(),
            [
                "blk.3.attn_q.bias",
                "blk.3.attn_k.bias",
                "blk.3.attn_v.bias"
            ]
        );
        assert_eq!(
            gguf_names("blocks.0.ln2.weight").unwrap(),
            ["blk.0.ffn_norm.weight"]
        );
        assert_eq!(
            gguf_names("blocks.1.attn.k_norm.weight").unwrap(),
            ["blk.1.attn_k_norm.weight"]
        );
        assert_eq!(gguf_names("head.weight").unwrap(), ["output.weight"]);
        assert_eq!(gguf_names("blocks.1.ln1.bias"), None);
        assert_eq!(gguf_names("pos_emb.weight"), None);
        assert_eq!(hf_names("pos_emb.weight"), None);
        assert!(is_buffer("model.layers.7.self_attn.rotary_emb.inv_freq"));
    }
}
