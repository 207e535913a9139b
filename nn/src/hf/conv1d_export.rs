//! Writing a [`Gpt`] as a Hugging Face GPT-2 directory.

use std::path::Path;

use headroom_kernels::DType;

use crate::decoder::Gpt;
use crate::error::{Error, Result};
use crate::hf::safetensors_file::WEIGHTS_FILE;
use crate::models::gpt2::Gpt2Config;
use crate::models::gpt2::names::{LM_HEAD, Layout, PREFIX, hf_name, stored_dims, transpose_bytes};

/// Writes `gpt` as a Hugging Face GPT-2 directory that
/// `transformers.GPT2LMHeadModel.from_pretrained(dir)` loads: creates `dir` (and its parents)
/// and writes `config.json` ([`Gpt2Config::from_gpt`] with the model's layer-norm epsilon) and
/// `model.safetensors` (f32, the names `save_pretrained` writes, `Conv1D` weights as
/// `[in, out]`, `lm_head.weight` only when the head is untied, metadata `{"format": "pt"}`).
///
/// The configuration's `bos_token_id` and `eos_token_id` are `end_of_text`, the tokenizer's
/// `<|endoftext|>` id, or without one the last id (where GPT-2's tokenizer has it).
///
/// Each file is written atomically (see [`checkpoint`](crate::checkpoint)): the weights first,
/// then the configuration. A model whose layer norms do not share one epsilon is an
/// [`Error::Config`], as GPT-2's configuration holds one.
pub fn export_gpt2(gpt: &Gpt, dir: &Path, end_of_text: Option<u32>) -> Result<()> {
    crate::hf::check_dense(gpt, "gpt-2 export")?;
    let mut config = Gpt2Config::from_gpt(gpt.config());
    config.layer_norm_epsilon = shared_epsilon(gpt)?;
    if let Some(end) = end_of_text {
        config.bos_token_id = Some(u64::from(end));
        config.eos_token_id = Some(u64::from(end));
    }
    let tensors = crate::lora::base_tensors(gpt)
        .into_iter()
        .map(|(name, t)| {
            let (hf, layout) = hf_name(&name).ok_or_else(|| {
                Error::config("gpt-2 export", format!("GPT-2 has no tensor for `{name}`"))
            })?;
            let key = match hf.as_str() {
                LM_HEAD => hf,
                _ => format!("{PREFIX}{hf}"),
            };
            let array = match t.dtype() {
                DType::F32 => t.array().clone(),
                _ => t.array().cast(DType::F32)?,
            };
            let dims = array.shape().dims().to_vec();
            let mut bytes = array.to_bytes()?;
            if let (Layout::Transposed, &[rows, cols]) = (layout, dims.as_slice()) {
                bytes = transpose_bytes(&bytes, rows, cols, DType::F32.size());
            }
            Ok((key, stored_dims(&dims, layout), bytes))
        })
        .collect::<Result<Vec<_>>>()?;
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_owned(),
        source,
    })?;
    super::safetensors_file::write_f32(&dir.join(WEIGHTS_FILE), &tensors)?;
    config.write(dir)
}

/// The epsilon every layer norm of `gpt` uses.
fn shared_epsilon(gpt: &Gpt) -> Result<f64> {
    let eps = gpt.ln_f.eps();
    let all = gpt
        .blocks
        .iter()
        .flat_map(|b| [b.ln1.eps(), b.ln2.eps()])
        .all(|e| e == eps);
    match all {
        true => Ok(eps),
        false => Err(Error::config(
            "gpt-2 export",
            "the layer norms use different epsilons, and GPT-2's configuration holds one",
        )),
    }
}
