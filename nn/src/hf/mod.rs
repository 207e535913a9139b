//! Hugging Face GPT-2 directories: a `config.json` and a `model.safetensors`, as
//! `transformers`' `save_pretrained` writes them and the Hub serves them.
//!
//! [`Gpt2Config::read`] reads the configuration and [`Gpt2Config::gpt_config`] turns it into
//! the shape of a [`Gpt`](crate::Gpt); [`load_gpt2`] fills that model's parameters from the
//! weights; [`export_gpt2`] writes a model back as a directory that
//! `transformers.GPT2LMHeadModel.from_pretrained` loads.
//!
//! The two layouts differ in names (`blocks.0.attn.qkv.weight` is
//! `transformer.h.0.attn.c_attn.weight`) and in GPT-2's `Conv1D` layers, whose weights are
//! stored `[in, out]` where a [`Linear`](crate::Linear) holds `[out, in]`. The computation is
//! the same: pre-norm blocks, the tanh GELU (`gelu_new`), scores scaled by
//! `1 / sqrt(head width)`, a head tied to the token embedding unless the configuration says
//! otherwise. The model's logits match transformers' within float rounding (the tests compare
//! them on a tiny model made by `scripts/hf/make_tiny_gpt2.py`).
//!
//! Only the model travels: the tokenizer (`tokenizer.json`) and the generation settings are
//! left to other tools.
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

mod config;
mod export;
mod fields;
mod finite;
mod import;
mod llama_config;
mod llama_import;
mod llama_names;
mod names;
mod pretrained;
mod weight_files;

pub use config::{CONFIG_FILE, Gpt2Config};
pub use export::export_gpt2;
pub use import::{WEIGHTS_FILE, load_gpt2};
pub use llama_config::{Architecture, LlamaConfig};
pub use llama_import::load_llama;
pub use pretrained::Pretrained;
pub use weight_files::{INDEX_FILE, model_dir};
