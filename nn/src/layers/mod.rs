//! The layers, one file each.

pub mod activation;
pub mod attention;
pub mod block;
pub mod block_in_documents;
pub mod block_mlp;
pub mod embedding;
pub mod layer_norm;
pub mod linear;
pub mod linear_weight;
pub mod lora_adapter;
pub mod norm;
pub mod rms_norm;
pub mod rotary;
pub mod sequential;
pub(crate) mod tiled_mlp;
