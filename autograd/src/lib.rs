#![doc = include_str!("../README.md")]

pub mod check;
mod context;
mod error;
mod gradients;
mod ops;
mod recompute;
mod tape;
mod tensor;

pub use context::{AutocastGuard, RecordingGuard, autocast, autocast_dtype, no_grad};
pub use error::{Error, Result};
pub use gradients::Gradients;
pub use recompute::recompute;
pub use tape::Tape;
pub use tensor::{Tensor, TensorId};
