//! A pretrained model of any family Headroom reads, as a Hugging Face directory or a GGUF
//! file: its configuration, the decoder it describes, and loading its weights into one.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{Error, Result};
use crate::gguf::{GgufFile, LlamaLayout, is_gguf, load_gguf};
use crate::hf::peft::{ADAPTER_CONFIG, PeftAdapter, load_peft};
use crate::hf::weight_files::model_dir;
use crate::json_fields::{CONFIG_FILE, read_json};
use crate::models::gemma3::Gemma3Config;
use crate::models::gemma3::config::is_gemma3;
use crate::models::gpt2::Gpt2Config;
use crate::models::llama::LlamaConfig;
use crate::models::{gemma3, gpt2, llama};
use crate::{Gpt, GptConfig};

/// The configuration of a pretrained model directory or GGUF file, of any family Headroom reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Pretrained {
    /// `GPT2LMHeadModel`.
    Gpt2(Gpt2Config),
    /// `LlamaForCausalLM`, `Qwen2ForCausalLM`, `Qwen3ForCausalLM` or `MistralForCausalLM`.
    Llama(LlamaConfig),
    /// `Gemma3ForCausalLM`.
    Gemma3(Gemma3Config),
    /// A GGUF file of llama.cpp's `llama`, `mistral`, `qwen2` or `qwen3` architecture.
    Gguf(LlamaLayout),
}

impl Pretrained {
    /// Reads the `config.json` of `dir` (or of the snapshot of a Hugging Face cache entry,
    /// [`model_dir`]), by its `model_type` (or `architectures`): `gpt2` as
    /// [`Gpt2Config::read`], `gemma3_text` as [`Gemma3Config::read`], any other as
    /// [`LlamaConfig::read`], which names the architectures it reads when the file's is not
    /// among them.
    ///
    /// A PEFT adapter directory reads as its base model's ([`adapter_base`]); a GGUF file
    /// ([`is_gguf`]) as [`LlamaLayout::read`] reads it.
    pub fn read(dir: &Path) -> Result<Self> {
        if is_gguf(dir) {
            return Ok(Self::Gguf(LlamaLayout::read(&GgufFile::open(dir)?)?));
        }
        if PeftAdapter::is_adapter_dir(dir) {
            return Self::read(&adapter_base(dir)?);
        }
        let dir = model_dir(dir)?;
        let path = dir.join(CONFIG_FILE);
        let value = read_json(&path)?;
        let gpt2 = value.get("model_type").and_then(Value::as_str) == Some("gpt2")
            || value
                .get("architectures")
                .and_then(|a| a.get(0))
                .and_then(Value::as_str)
                == Some("GPT2LMHeadModel");
        if gpt2 {
            return Ok(Self::Gpt2(Gpt2Config::from_json(&path, &value)?));
        }
        match value.as_object().is_some_and(is_gemma3) {
            true => Ok(Self::Gemma3(Gemma3Config::from_json(&path, &value)?)),
            false => Ok(Self::Llama(LlamaConfig::from_json(&path, &value)?)),
        }
    }

    /// The decoder that holds this model, with `dropout` everywhere.
    pub fn gpt_config(&self, dropout: f64) -> GptConfig {
        match self {
            Self::Gpt2(config) => config.gpt_config(dropout),
            Self::Llama(config) => config.gpt_config(dropout),
            Self::Gemma3(config) => config.gpt_config(dropout),
            Self::Gguf(layout) => layout.config.gpt_config(dropout),
        }
    }

    /// What its norms add to the variance or the mean square.
    pub fn norm_eps(&self) -> f64 {
        match self {
            Self::Gpt2(config) => config.layer_norm_epsilon,
            Self::Llama(config) => config.options.norm_eps,
            Self::Gemma3(config) => config.options.norm_eps,
            Self::Gguf(layout) => layout.config.options.norm_eps,
        }
    }

    /// The `config.json` field (or the GGUF key) that holds a [`GptConfig`] field, for
    /// messages.
    pub fn field(&self, field: &str) -> String {
        match self {
            Self::Gpt2(_) => gpt2::config::hf_field(field).to_owned(),
            Self::Llama(_) => llama::config::hf_field(field).to_owned(),
            Self::Gemma3(_) => gemma3::config::hf_field(field).to_owned(),
            Self::Gguf(layout) => layout.key(field),
        }
    }

    /// The file that holds the configuration of the model at `path`: its `config.json`, or the
    /// GGUF file itself.
    pub fn source(&self, path: &Path) -> PathBuf {
        match self {
            Self::Gguf(_) => path.to_owned(),
            _ => model_dir(path)
                .unwrap_or_else(|_| path.to_owned())
                .join(CONFIG_FILE),
        }
    }

    /// Fills every parameter of `gpt` from the weights of `dir` ([`load_gpt2`], or
    /// [`load_llama`] for every family laid out as Llama's).
    ///
    /// [`load_gpt2`]: crate::hf::load_gpt2
    /// [`load_llama`]: crate::hf::load_llama
    ///
    /// From a PEFT adapter directory: the base's weights, then the adapters ([`load_peft`]);
    /// from a GGUF file, its tensors ([`load_gguf`]).
    pub fn load(&self, dir: &Path, gpt: &mut Gpt) -> Result<()> {
        if PeftAdapter::is_adapter_dir(dir) {
            self.load(&adapter_base(dir)?, gpt)?;
            return load_peft(dir, gpt).map(drop);
        }
        match self {
            Self::Gpt2(_) => super::load_gpt2(&model_dir(dir)?, gpt),
            Self::Llama(_) | Self::Gemma3(_) => super::load_llama(dir, gpt),
            Self::Gguf(_) => load_gguf(dir, gpt),
        }
    }
}

/// The base model directory of the PEFT adapter directory `dir`: its
/// `base_model_name_or_path`, relative to `dir` when relative, which must be a directory
/// here.
pub fn adapter_base(dir: &Path) -> Result<PathBuf> {
    let adapter = PeftAdapter::read(dir)?;
    adapter.base_dir(dir).ok_or_else(|| Error::Checkpoint {
        path: dir.join(ADAPTER_CONFIG),
        key: "base_model_name_or_path".into(),
        detail: format!(
            "{:?} is no directory here: the base model must be a local directory",
            adapter.base
        ),
    })
}
