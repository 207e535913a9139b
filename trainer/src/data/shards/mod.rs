//! Token shards: text tokenized once into files of little-endian token ids behind a small
//! header ([`ShardHeader`]), grouped in a prepared directory with a [`Manifest`] and a copy of
//! the tokenizer, and read back memory-mapped ([`ShardFile`]).

mod find;
mod header;
mod manifest;
mod prepare;
mod reader;
mod staging;

pub use find::{FileFilter, find_files};
pub use header::{HEADER_BYTES, MAGIC, SCORED, STARTS_CONVERSATION, ShardHeader, VERSION};
pub use manifest::{ChatManifest, MANIFEST, Manifest, ShardEntry, Skipped, TOKENIZER};
pub use prepare::{HeldOut, PrepareOptions, Prepared, prepare, prepare_chat, read_text_file};
pub use reader::{ShardFile, encode};
pub use staging::UNFINISHED;
