//! Model families, one folder each: what only that family knows (its options and their
//! `config.json` fields, its checkpoints' tensor names, how it assembles its blocks from the
//! shared layers). Formats (`hf/`) ask a family for names; the decoder asks it for blocks.

mod assembly;
mod decoder_config;
mod family;
pub mod gemma3;
pub mod gpt2;
pub mod llama;
mod preset;

pub use decoder_config::GptConfig;
pub use family::Family;
pub use preset::Preset;
