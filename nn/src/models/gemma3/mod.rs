//! Gemma 3 (`Gemma3ForCausalLM`): Llama's skeleton with a GeGLU MLP, RMSNorms that scale by
//! one plus their weight, before and after each sublayer and on queries and keys, embeddings
//! scaled by the square root of the width, and sliding-window attention on five layers of six,
//! each kind with its own rotary base. Its options, `config.json` and tensor names.

pub(crate) mod blocks;
pub(crate) mod config;
pub(crate) mod names;
pub(crate) mod options;
mod presets;

pub use config::Gemma3Config;
pub use options::Gemma3Options;
pub(crate) use presets::PRESETS;
