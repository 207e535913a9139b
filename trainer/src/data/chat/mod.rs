//! Instruction data: conversations in JSON Lines rendered with the model's chat template into
//! token shards that mark which tokens the loss scores (the assistant's, by default) and where
//! each conversation begins, and read back as training windows, packed several to a window or
//! one a window, padded.

mod dataset;
mod encode;
mod jsonl;
mod mask;
mod packing;
mod render;
mod template;

pub use dataset::{ChatShards, Packing};
pub use encode::{ChatEncoder, EncodedChat, EncodedFile, Score};
pub use jsonl::{Conversation, ROLES};
pub use packing::{Window, one_each, pack};
pub use render::{RenderError, Rendered, Renderer};
pub use template::{CHAT_TEMPLATE_FILE, CHAT_TEMPLATE_KEY, TemplateSource};
