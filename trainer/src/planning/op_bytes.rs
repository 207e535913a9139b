//! Bytes per op: what a micro-batch's forward pass saves for its backward pass, op by op, as
//! the tape accounts for it and the planner's table gives it.

use headroom_autograd::SavedReport;
use serde::{Deserialize, Serialize};

/// The activation bytes one kind of op saved for the backward pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpBytes {
    /// The op's name (`matmul`, `layer_norm`, `scaled_dot_product_attention`, ...).
    pub op: String,
    /// The bytes its saved activations hold, each buffer counted once.
    pub bytes: u64,
}

/// The saved activations of `saved` per kind of op, largest first.
pub fn op_bytes(saved: &SavedReport) -> Vec<OpBytes> {
    saved
        .activation_bytes_by_op()
        .into_iter()
        .map(|(op, bytes)| OpBytes {
            op: op.to_owned(),
            bytes: bytes as u64,
        })
        .collect()
}
