//! The Llama family (Llama 2 and 3, SmolLM2, Qwen2, Qwen3, Mistral): rotary positions, RMSNorm,
//! a SwiGLU MLP and grouped key/value heads; its options, `config.json` and tensor names.

pub(crate) mod blocks;
pub(crate) mod config;
pub(crate) mod names;
pub(crate) mod options;
mod presets;

pub use config::{Architecture, LlamaConfig};
pub use options::LlamaOptions;
pub(crate) use presets::PRESETS;
