//! Hugging Face model directories, as `transformers`' `save_pretrained` writes them and the Hub
//! serves them: a `config.json` and the weights, in one `model.safetensors` or in shards that
//! `model.safetensors.index.json` lists. Each family's `config.json` and tensor names live in
//! its folder under [`models`](crate::models); the formats here ask it. Two layouts are read and
//! written:
//!
//! - **GPT-2** (`GPT2LMHeadModel`): [`Gpt2Config::read`] reads the configuration and
//!   [`Gpt2Config::gpt_config`] turns it into the shape of a [`Gpt`](crate::Gpt);
//!   [`load_gpt2`] fills that model's parameters; [`export_gpt2`] writes a model back. The
//!   layouts differ in names and in GPT-2's `Conv1D` weights, stored `[in, out]` where a
//!   [`Linear`](crate::Linear) holds `[out, in]`.
//! - **Llama's layout**, which the Llama family (`LlamaForCausalLM` for Llama 2 and 3 and
//!   SmolLM2, `Qwen2ForCausalLM`, `Qwen3ForCausalLM`, `MistralForCausalLM`) and Gemma 3
//!   (`Gemma3ForCausalLM`) share: [`LlamaConfig::read`] or [`Gemma3Config::read`] and their
//!   `gpt_config`, [`load_llama`] (one file or shards, bf16 kept as stored, a Hugging Face cache
//!   entry through [`model_dir`]), and [`export_llama`], which writes one file or shards
//!   ([`LlamaExport`]) with the query, key and value projections stored apart as transformers
//!   holds them.
//!
//! Loading checks every tensor before any parameter changes; [`check_weights`] checks the
//! files, names and shapes from the headers alone, before a model is planned or built. The models' logits match
//! transformers' within float rounding, and an export loads back bit for bit (the tests
//! compare them on tiny models made by `scripts/hf/make_tiny_gpt2.py`,
//! `scripts/hf/make_tiny_llama.py` and `scripts/hf/make_tiny_gemma3.py`; `scripts/hf/check_export.py` checks an export with
//! transformers itself).
//!
//! The tokenizer and generation files that make a model the same model to other tools
//! (special tokens, chat template, generation defaults) travel beside the weights as they are
//! ([`copy_companions`], [`SpecialTokens`]).
//!
//! ```
//! use headroom_nn::{Gpt, Initializer, Module, hf};
//! use headroom_kernels::{Device, DeviceConfig, DType};
//! let cpu = Device::cpu(DeviceConfig::new(64 << 20))?;
//! let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny-gpt2");
//! let config = hf::Gpt2Config::read(&dir)?;
//! let mut gpt = Gpt::new(&mut Initializer::new(&cpu, DType::F32, 0), config.gpt_config(0.0))?;
//! hf::load_gpt2(&dir, &mut gpt)?;
//! let out = std::env::temp_dir().join(format!("headroom-doc-hf-{}", std::process::id()));
//! hf::export_gpt2(&gpt, &out, None)?;
//! assert_eq!(hf::Gpt2Config::read(&out)?.gpt_config(0.0), *gpt.config());
//! # std::fs::remove_dir_all(&out).ok();
//! # Ok::<(), headroom_nn::Error>(())
//! ```
//!
//! A Llama-family model, exported in shards of at most 64 kB:
//!
//! ```
//! use headroom_nn::{Gpt, Initializer, Module, hf};
//! use headroom_kernels::{Device, DeviceConfig, DType};
//! let cpu = Device::cpu(DeviceConfig::new(64 << 20))?;
//! let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny-qwen3");
//! let config = hf::LlamaConfig::read(&dir)?;
//! let mut gpt = Gpt::new(&mut Initializer::new(&cpu, DType::F32, 0), config.gpt_config(0.0))?;
//! hf::load_llama(&dir, &mut gpt)?;
//! let out = std::env::temp_dir().join(format!("headroom-doc-hf-llama-{}", std::process::id()));
//! let options = hf::LlamaExport { shard_bytes: 64_000, ..Default::default() };
//! hf::export_llama(&gpt, &out, &options)?;
//! assert!(out.join(hf::INDEX_FILE).exists());
//! assert_eq!(hf::LlamaConfig::read(&out)?.gpt_config(0.0), *gpt.config());
//! # std::fs::remove_dir_all(&out).ok();
//! # Ok::<(), headroom_nn::Error>(())
//! ```

mod companions;
mod conv1d_export;
mod conv1d_import;
mod export;
mod finite;
mod hub_cache;
mod import;
mod peft;
mod pretrained;
mod safetensors_file;
mod shards;
mod weight_files;
mod weight_headers;

pub use crate::json_fields::CONFIG_FILE;
pub use crate::models::gemma3::Gemma3Config;
pub use crate::models::gpt2::Gpt2Config;
pub use crate::models::llama::{Architecture, LlamaConfig};
pub use companions::{
    COMPANION_FILES, GENERATION_CONFIG, SpecialTokens, copy_companion, copy_companions,
};
pub use conv1d_export::export_gpt2;
pub use conv1d_import::load_gpt2;
pub use export::{LlamaExport, export_llama};
pub use hub_cache::cached_model;
pub use import::load_llama;
pub use peft::{ADAPTER_CONFIG, ADAPTER_WEIGHTS, PeftAdapter, export_peft, load_peft};
pub use pretrained::{Pretrained, adapter_base};
pub use safetensors_file::WEIGHTS_FILE;
pub use shards::DEFAULT_SHARD_BYTES;
pub use weight_files::{INDEX_FILE, model_dir};
pub use weight_headers::{check_weights, grouped_digits};

/// An error naming `op` when `gpt` stores weights quantized, which an export would leave out:
/// merged ([`crate::lora::merge`]) they are tensors again.
fn check_dense(gpt: &crate::Gpt, op: &'static str) -> crate::Result<()> {
    match crate::Module::quantized_count(gpt) {
        0 => Ok(()),
        n => Err(crate::Error::config(
            op,
            format!(
                "{n} weights are stored quantized: merge the adapters first (`headroom export \
                 --merge`), or export the adapters alone in PEFT's format"
            ),
        )),
    }
}
