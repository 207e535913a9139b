//! `manifest.json`: what a prepared directory holds. `headroom prepare` writes it last, so a
//! directory without one was not finished.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The manifest's file name in a prepared directory.
pub const MANIFEST: &str = "manifest.json";

/// The tokenizer's file name in a prepared directory (a copy of the one used).
pub const TOKENIZER: &str = "tokenizer.json";

/// A prepared directory's contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The tokenizer's hash (FNV-1a of its `tokenizer.json`), in hex.
    pub tokenizer_hash: String,
    /// Its vocabulary: every token is below it.
    pub vocab: u64,
    /// Bytes per token in the shards.
    pub token_bytes: usize,
    /// The training shards, in order.
    pub train: Vec<ShardEntry>,
    /// The held-out shards, in order.
    pub held_out: Vec<ShardEntry>,
    /// Files left out, and why.
    pub skipped: Vec<Skipped>,
    /// Chat data: the template the conversations were rendered with and what the loss scores;
    /// none for text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<ChatManifest>,
}

/// How a directory's conversations were rendered and scored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatManifest {
    /// Where the chat template was read.
    pub template: PathBuf,
    /// Its hash (FNV-1a of its source), in hex.
    pub template_hash: String,
    /// What the loss scores: `assistant` (the assistant's turns) or `all`.
    pub scored: String,
}

/// One shard of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// Its file name in the directory.
    pub file: String,
    /// Its tokens.
    pub tokens: u64,
    /// The documents (files, or parts of one; conversations in chat data) tokenized into it.
    pub documents: usize,
    /// Chat data: the tokens the loss scores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scored: Option<u64>,
}

/// A file or directory `headroom prepare` left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The file.
    pub path: PathBuf,
    /// Why: not UTF-8, binary, unreadable (a file, a directory, a link to nowhere).
    pub reason: String,
}

impl Manifest {
    /// Reads the manifest of the prepared directory `dir`.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|err| match err.kind() {
            std::io::ErrorKind::NotFound => Error::Data {
                path: path.clone(),
                detail: "missing: this is not a directory `headroom prepare` finished (run it \
                         again to complete it)"
                    .into(),
            },
            _ => Error::io(&path)(err),
        })?;
        serde_json::from_str(&text).map_err(|err| Error::Data {
            path,
            detail: format!("not a manifest of token shards: {err}"),
        })
    }

    /// Why these shards cannot be read with the tokenizer at `tokenizer` (`whose` it is, for
    /// the message, such as "the run's"): none when they were tokenized by it, or when it
    /// cannot be read (its own error comes where it is loaded).
    pub fn tokenizer_mismatch(&self, tokenizer: &Path, whose: &str) -> Option<String> {
        let hash = crate::data::tokenizer::file_hash(tokenizer).ok()?;
        (hash != self.tokenizer_hash).then(|| {
            format!(
                "tokenized by tokenizer {}, not by {whose} {} ({hash}): prepare the text again \
                 with --tokenizer {}",
                self.tokenizer_hash,
                tokenizer.display(),
                tokenizer.display()
            )
        })
    }

    /// Tokens in the training shards.
    pub fn train_tokens(&self) -> u64 {
        self.train.iter().map(|s| s.tokens).sum()
    }

    /// Tokens the loss scores in the training shards and in the held-out ones (chat data).
    pub fn scored_tokens(&self) -> (u64, u64) {
        let sum = |entries: &[ShardEntry]| entries.iter().filter_map(|s| s.scored).sum();
        (sum(&self.train), sum(&self.held_out))
    }

    /// Tokens in the held-out shards.
    pub fn held_out_tokens(&self) -> u64 {
        self.held_out.iter().map(|s| s.tokens).sum()
    }
}
