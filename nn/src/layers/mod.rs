//! The layers, one file each.

pub mod activation;
pub mod attention;
pub mod block;
pub mod embedding;
pub mod gpt;
pub mod layer_norm;
pub mod linear;
pub mod rms_norm;
pub mod sequential;
