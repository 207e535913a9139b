#![doc = include_str!("../README.md")]

mod accounting;
pub mod checkpoint;
mod decoder;
mod error;
pub mod gguf;
pub mod hf;
mod init;
mod json_fields;
mod kv_cache;
mod layer_kind;
pub mod layers;
pub mod lora;
pub mod loss;
pub mod models;
mod module;
pub mod optim;
mod overwrite;
mod recomputed_modules;
mod sampling;
mod sharded_params;
mod streamed_pass;
mod streaming;

pub use accounting::{TrainingMemory, training_memory, training_memory_on};
pub use decoder::{Gpt, HEAD_CHUNK_LOGITS, Placement};
pub use error::{Error, Result};
pub use headroom_autograd::chunk_of;
pub use init::{Init, Initializer};
pub use kv_cache::KvCache;
pub use layer_kind::LayerKind;
pub use layers::activation::{Activation, Dropout, DropoutCounter};
pub use layers::attention::CausalSelfAttention;
pub use layers::block::Block;
pub use layers::block_mlp::{BlockMlp, GateActivation, MlpKind};
pub use layers::embedding::Embedding;
pub use layers::layer_norm::LayerNorm;
pub use layers::linear::Linear;
pub use layers::norm::Norm;
pub use layers::rms_norm::RmsNorm;
pub use layers::rotary::RotaryEmbedding;
pub use layers::sequential::{Sequential, mlp};
pub use models::gemma3::Gemma3Options;
pub use models::llama::LlamaOptions;
pub use models::{Family, GptConfig};
pub use module::{Module, visit_child, visit_child_mut};
pub use optim::{
    AdamW, AdamWConfig, GradNorm, Landed, LrSchedule, Optimizer, OptimizerState, Sgd, SgdConfig,
    Shared, StatePrecision, StateShard, clip_grad_norm,
};
pub use recomputed_modules::{
    Recompute, recomputed, recomputed_offloaded, recomputed_sharded, recomputed_streamed,
};
pub use sampling::{Sampler, Sampling};
pub use sharded_params::{Cut, ParamShards};
pub use streamed_pass::Streamed;
pub use streaming::{WeightsAhead, fetched, move_to};
