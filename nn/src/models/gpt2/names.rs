//! Where each of a [`Gpt`](crate::Gpt)'s parameters lives in a Hugging Face GPT-2 checkpoint,
//! and in what layout.

/// The prefix `save_pretrained` puts before every tensor of the transformer (all but the head).
pub(crate) const PREFIX: &str = "transformer.";

/// The head's name, never prefixed.
pub(crate) const LM_HEAD: &str = "lm_head.weight";

/// The token embedding's name, without the prefix.
pub(crate) const WTE: &str = "wte.weight";

/// How a parameter's values are laid out in the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// As in the model.
    Same,
    /// A GPT-2 `Conv1D` weight: `[in, out]`, the transpose of the model's `[out, in]`.
    Transposed,
    /// The position table: at least as many rows as the model's context, of which the model
    /// takes the first.
    Positions,
}

/// The checkpoint's name (without [`PREFIX`]) and layout of the model's parameter `name`, or
/// none when GPT-2 has no such tensor.
pub(crate) fn hf_name(name: &str) -> Option<(String, Layout)> {
    let plain = |hf: &str| Some((hf.to_owned(), Layout::Same));
    match name {
        "tok_emb.weight" => return plain(WTE),
        "pos_emb.weight" => return Some(("wpe.weight".to_owned(), Layout::Positions)),
        "ln_f.weight" => return plain("ln_f.weight"),
        "ln_f.bias" => return plain("ln_f.bias"),
        "head.weight" => return plain(LM_HEAD),
        _ => {}
    }
    let rest = name.strip_prefix("blocks.")?;
    let (index, rest) = rest.split_once('.')?;
    let index: usize = index.parse().ok()?;
    let (layer, kind) = rest.rsplit_once('.')?;
    let (hf_layer, conv1d) = match layer {
        "ln1" => ("ln_1", false),
        "ln2" => ("ln_2", false),
        "attn.qkv" => ("attn.c_attn", true),
        "attn.proj" => ("attn.c_proj", true),
        "mlp.fc" => ("mlp.c_fc", true),
        "mlp.proj" => ("mlp.c_proj", true),
        _ => return None,
    };
    let layout = match (kind, conv1d) {
        ("weight", true) => Layout::Transposed,
        ("weight" | "bias", _) => Layout::Same,
        _ => return None,
    };
    Some((format!("h.{index}.{hf_layer}.{kind}"), layout))
}

/// True for the attention buffers older checkpoints hold beside the weights (the causal mask
/// `h.{i}.attn.bias` and `h.{i}.attn.masked_bias`, with or without [`PREFIX`]): nothing to load.
pub(crate) fn is_buffer(key: &str) -> bool {
    let key = key.strip_prefix(PREFIX).unwrap_or(key);
    let Some(rest) = key.strip_prefix("h.") else {
        return false;
    };
    match rest.split_once('.') {
        Some((index, tail)) => {
            index.parse::<usize>().is_ok() && matches!(tail, "attn.bias" | "attn.masked_bias")
        }
        None => false,
    }
}

/// The stored shape of a parameter of `dims` in `layout`: the transpose for a `Conv1D` weight,
/// the same otherwise (the position table's rows are checked apart).
pub(crate) fn stored_dims(dims: &[usize], layout: Layout) -> Vec<usize> {
    match layout {
        Layout::Transposed => dims.iter().rev().copied().collect(),
        Layout::Same | Layout::Positions => dims.to_vec(),
    }
}

/// Transposes a `[rows, cols]` matrix of `element`-byte values held in `bytes` (row-major) into
/// `[cols, rows]`. `bytes` holds exactly `rows * cols * element` bytes.
pub(crate) fn transpose_bytes(bytes: &[u8], rows: usize, cols: usize, element: usize) -> Vec<u8> {
    let mut out = vec![0u8; bytes.len()];
    for (r, row) in bytes.chunks_exact(cols * element).enumerate().take(rows) {
        for (c, value) in row.chunks_exact(element).enumerate() {
            let at = (c * rows + r) * element;
            if let Some(slot) = out.get_mut(at..at + element) {
                slot.copy_from_slice(value);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_both_ways_of_weights() {
        assert_eq!(
            hf_name("blocks.3.attn.qkv.weight"),
            Some(("h.3.attn.c_attn.weight".into(), Layout::Transposed))
        );
        assert_eq!(
            hf_name("blocks.0.mlp.proj.bias"),
            Some(("h.0.mlp.c_proj.bias".into(), Layout::Same))
        );
        assert_eq!(
            hf_name("blocks.1.ln2.weight"),
            Some(("h.1.ln_2.weight".into(), Layout::Same))
        );
        assert_eq!(hf_name("blocks.x.ln2.weight"), None);
        assert_eq!(hf_name("blocks.1.ln2.scale"), None);
        assert!(is_buffer("transformer.h.11.attn.masked_bias"));
        assert!(is_buffer("h.0.attn.bias"));
        assert!(!is_buffer("h.0.attn.c_attn.bias"));
    }

    #[test]
    fn transpose_swaps_rows_and_columns() {
        // [[1, 2, 3], [4, 5, 6]] of 2-byte values.
        let bytes: Vec<u8> = [1u16, 2, 3, 4, 5, 6]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let out = transpose_bytes(&bytes, 2, 3, 2);
        let values: Vec<u16> = out
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(values, [1, 4, 2, 5, 3, 6]);
    }
}
