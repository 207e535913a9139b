#![doc = include_str!("../README.md")]

mod again;
mod autocast;
pub mod check;
mod error;
mod gradients;
mod kept;
mod ops;
mod prefetch;
mod recompute;
mod recording;
mod saved;
mod tape;
mod tensor;

pub use autocast::{AutocastGuard, autocast, autocast_dtype};
pub use error::{Error, Result};
pub use gradients::Gradients;
pub use ops::{LinearWeight, chunk_of, every_rank};
pub use recompute::{recompute, recompute_offloaded};
pub use recording::{RecordingGuard, no_grad};
pub use saved::{OpSaved, SavedArray, SavedReport};
pub use tape::Tape;
pub use tensor::{Tensor, TensorId};
