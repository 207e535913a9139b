//! Token shards prepared by `headroom prepare`: windows of `context + 1` tokens read from the
//! memory-mapped shards, each predicting its next tokens; the held-out shards are judged by
//! loss (and perplexity).
//!
//! Windows do not cross shards and follow each other by `context` tokens, so every token but
//! a shard's first is a target once per epoch. The held-out set is at most `eval_size` windows,
//! spread evenly over the held-out shards.

use std::path::Path;
use std::sync::Arc;

use super::{DataShape, Dataset, Sample};
use crate::data::shards::{Manifest, ShardEntry, ShardFile, TOKENIZER};
use crate::data::tokenizer::{file_hash, hash_hex};
use crate::error::{Error, Result};

/// Windows of a prepared directory's shards.
#[derive(Debug, Clone)]
pub struct TokenShards {
    shards: Vec<Arc<ShardFile>>,
    /// `starts[i]` is the first window of shard `i`; the last entry is the number of windows.
    starts: Vec<usize>,
    /// Tokens per sample (the model's context).
    context: usize,
    vocab: usize,
    /// Serve only this many windows, spread evenly (the held-out set); none: all of them.
    picks: Option<usize>,
}

impl TokenShards {
    /// The training and held-out windows of the prepared directory `dir`, `context` tokens
    /// each, at most `eval_size` held out.
    pub fn open(dir: &Path, context: usize, eval_size: usize) -> Result<(Self, Self)> {
        let manifest = checked_manifest(dir)?;
        let train = Self::of(dir, &manifest, &manifest.train, context, "training")?;
        let eval = Self::held_out_of(dir, &manifest, context, eval_size)?;
        Ok((train, eval))
    }

    /// The held-out windows alone of the prepared directory `dir` (for judging a model: the
    /// training shards are neither opened nor checked).
    pub fn open_held_out(dir: &Path, context: usize, eval_size: usize) -> Result<Self> {
        let manifest = checked_manifest(dir)?;
        Self::held_out_of(dir, &manifest, context, eval_size)
    }

    fn held_out_of(
        dir: &Path,
        manifest: &Manifest,
        context: usize,
        eval_size: usize,
    ) -> Result<Self> {
        let mut eval = Self::of(dir, manifest, &manifest.held_out, context, "held-out")?;
        if eval.windows() > eval_size {
            eval.picks = Some(eval_size.max(1));
        }
        Ok(eval)
    }

    fn of(
        dir: &Path,
        manifest: &Manifest,
        entries: &[ShardEntry],
        context: usize,
        what: &str,
    ) -> Result<Self> {
        let shards = open_shards(dir, manifest, entries)?;
        let mut starts = vec![0];
        for shard in &shards {
            let windows = shard.len().saturating_sub(1) / context.max(1);
            starts.push(starts.last().copied().unwrap_or(0) + windows);
        }
        let data = Self {
            shards,
            starts,
            context,
            vocab: manifest.vocab as usize,
            picks: None,
        };
        if data.windows() == 0 {
            let tokens: u64 = entries.iter().map(|e| e.tokens).sum();
            return Err(Error::Data {
                path: dir.to_owned(),
                detail: format!(
                    "the {what} shards hold {tokens} tokens: not one window of {} (the \
                     context and the next token) in any shard",
                    context + 1
                ),
            });
        }
        Ok(data)
    }

    /// Every window of the shards.
    fn windows(&self) -> usize {
        self.starts.last().copied().unwrap_or(0)
    }
}

/// The shards of `entries` in the prepared directory `dir`, each checked against `manifest`.
pub(crate) fn open_shards(
    dir: &Path,
    manifest: &Manifest,
    entries: &[ShardEntry],
) -> Result<Vec<Arc<ShardFile>>> {
    let mut shards = Vec::new();
    for entry in entries {
        let path = dir.join(&entry.file);
        let shard = ShardFile::open(&path)?;
        let header = shard.header();
        let hash = hash_hex(header.tokenizer_hash);
        if hash != manifest.tokenizer_hash || header.vocab != manifest.vocab {
            return Err(Error::Data {
                path,
                detail: format!(
                    "tokenized by tokenizer {hash} with a vocabulary of {}, where the \
                     manifest says {} and {}: the directory mixes two preparations",
                    header.vocab, manifest.tokenizer_hash, manifest.vocab
                ),
            });
        }
        if header.tokens != entry.tokens {
            return Err(Error::Data {
                path,
                detail: format!(
                    "holds {} tokens where the manifest says {}: the directory mixes two \
                     preparations (run `headroom prepare` again)",
                    header.tokens, entry.tokens
                ),
            });
        }
        shards.push(Arc::new(shard));
    }
    Ok(shards)
}

/// The manifest of the prepared directory `dir`, once its copy of the tokenizer is known to be
/// the one the shards were tokenized with.
pub(crate) fn checked_manifest(dir: &Path) -> Result<Manifest> {
    let manifest = Manifest::read(dir)?;
    let tokenizer = dir.join(TOKENIZER);
    let hash = file_hash(&tokenizer)?;
    if hash != manifest.tokenizer_hash {
        return Err(Error::Data {
            path: tokenizer,
            detail: format!(
                "its hash {hash} is not the {} the shards were tokenized with: it was \
                 replaced after `headroom prepare`",
                manifest.tokenizer_hash
            ),
        });
    }
    Ok(manifest)
}

impl Dataset for TokenShards {
    fn len(&self) -> usize {
        self.picks.unwrap_or_else(|| self.windows())
    }

    fn shape(&self) -> DataShape {
        DataShape::tokens(self.vocab, self.context)
    }

    fn sample(&self, index: usize) -> Result<Sample> {
        let window = match self.picks {
            Some(picks) => index * self.windows() / picks,
            None => index,
        };
        let shard = self.starts.partition_point(|&start| start <= window) - 1;
        let start = (window - self.starts[shard]) * self.context;
        let tokens = self.shards[shard].tokens(start, self.context + 1);
        Ok(Sample::tokens(
            tokens[..self.context].to_vec(),
            tokens[1..].to_vec(),
        ))
    }
}
