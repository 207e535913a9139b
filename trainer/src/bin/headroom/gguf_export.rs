//! `headroom export --gguf`: a run's Llama-family model (a LoRA run's adapters merged first)
//! as one GGUF file for llama.cpp and Ollama, with its tokenizer and chat template.

use std::collections::BTreeMap;
use std::path::Path;

use headroom_kernels::DType;
use headroom_nn::Gpt;
use headroom_nn::gguf::{GgufExport, GgufQuant, GgufTokenizer, SpecialIds, export_llama_gguf};
use headroom_trainer::data::tokenizer::TextTokenizer;
use headroom_trainer::model::TrainModel;
use headroom_trainer::trained::{SavedRun, UseSettings, identity_sources, special_tokens};
use headroom_trainer::{Error, Result};

use crate::say;

/// Writes the model of `run_dir` (a run directory, or a Hugging Face model directory or Hub
/// id) to `out` as GGUF in `quant` (by default as llama.cpp's converter picks: bf16 for bf16
/// weights, f16 otherwise), replacing a file there only when `overwrite` is set.
pub fn export_gguf(
    run_dir: &Path,
    out: &Path,
    quant: Option<GgufQuant>,
    overwrite: bool,
) -> Result<()> {
    let settings = UseSettings {
        device: Some("cpu".into()),
        memory_limit: None,
    };
    let run = SavedRun::open(run_dir, &settings, None)?;
    let TrainModel::Gpt(gpt) = &run.model else {
        return Err(Error::Config {
            problems: vec!["export --gguf: the run's model is an MLP, not a GPT".into()],
        });
    };
    let merged;
    let gpt = match &run.config.model.lora {
        Some(_) => {
            let mut copy = gpt.as_ref().clone();
            headroom_nn::lora::merge(&mut copy)?;
            merged = copy;
            &merged
        }
        None => gpt.as_ref(),
    };
    // Refused before the tokenizer is read, so that the model's own reason comes first.
    headroom_nn::gguf::architecture(gpt)?;
    let quant = quant.unwrap_or_else(|| default_quant(gpt));
    let sources = identity_sources(&run.run_dir, &run.config);
    let ids = special_ids(&run, &sources)?;
    let tokenizer = GgufTokenizer::read(&sources, gpt.config().vocab, &ids)?;
    let name = run
        .run_dir
        .file_name()
        .map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned());
    let options = GgufExport {
        quant,
        name,
        tokenizer: tokenizer.metadata.clone(),
        overwrite,
    };
    let exported = export_llama_gguf(gpt, out, &options)?;
    let mut types: BTreeMap<String, usize> = BTreeMap::new();
    for tensor in &exported.tensors {
        *types.entry(tensor.ty().to_string()).or_default() += 1;
    }
    let types: Vec<String> = types.iter().map(|(ty, n)| format!("{n} {ty}")).collect();
    let merged_note = match run.config.model.lora.is_some() {
        true => ", its LoRA adapters merged",
        false => "",
    };
    let template = match tokenizer.chat_template {
        true => " and its chat template",
        false => " (no chat template found)",
    };
    say(format_args!(
        "exported {}{merged_note} as GGUF ({} architecture, {quant}): {}, {} in {} tensors ({}); \
         tokenizer of {} tokens, pre-tokenizer {}{template}",
        run_dir.display(),
        exported.architecture,
        out.display(),
        headroom_alloc::format_bytes(exported.bytes),
        exported.tensors.len(),
        types.join(", "),
        tokenizer.tokens,
        tokenizer.pre,
    ))
}

/// llama.cpp's converter's `--outtype auto`: bf16 where the first matrix is bf16, f16
/// otherwise.
fn default_quant(gpt: &Gpt) -> GgufQuant {
    let first = headroom_nn::lora::base_tensors(gpt)
        .into_iter()
        .find(|(_, t)| t.shape().dims().len() >= 2);
    match first.map(|(_, t)| t.dtype()) {
        Some(DType::BF16) => GgufQuant::BF16,
        _ => GgufQuant::F16,
    }
}

/// The special ids the model's files name (its generation_config.json, then config.json), or
/// else the tokenizer's beginning and end of text, as `export --hf` writes them.
fn special_ids(run: &SavedRun, sources: &[std::path::PathBuf]) -> Result<SpecialIds> {
    let tokens = special_tokens(sources)?;
    let mut ids = SpecialIds {
        bos: tokens.bos,
        eos: tokens.eos.first().copied(),
        pad: tokens.pad,
    };
    let path = run.tokenizer_path();
    if (ids.bos.is_none() || ids.eos.is_none()) && path.exists() {
        let tokenizer = TextTokenizer::load(&path)?;
        let end = tokenizer.end_of_text().map(u64::from);
        ids.eos = ids.eos.or(end);
        ids.bos = ids.bos.or(tokenizer.begin_of_text().map(u64::from)).or(end);
    }
    Ok(ids)
}
