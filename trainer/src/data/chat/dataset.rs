//! Chat shards read as training windows: conversations packed several to a window (with where
//! each begins, [`STARTS`](crate::data::STARTS)) or one a window, padded; the targets are the
//! next tokens the shards flag as scored, never across two conversations.
//!
//! A conversation longer than the context is cut to it, and one with no scored token within
//! the context is left out; the log counts both. Held-out windows hold one conversation each,
//! so their loss needs no document masking.

use std::path::Path;
use std::sync::Arc;

use super::packing::{Window, assemble, one_each, pack};
use crate::data::shards::{Manifest, SCORED, STARTS_CONVERSATION, ShardEntry, ShardFile};
use crate::data::token_shards::{checked_manifest, open_shards};
use crate::data::{DataShape, Dataset, Sample};
use crate::error::{Error, Result};

/// How conversations fill the training windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packing {
    /// Whole conversations in order, as many as fit in each window.
    Packed,
    /// One conversation a window, padded.
    OneEach,
}

/// Where a conversation lies.
#[derive(Debug, Clone, Copy)]
struct Span {
    shard: usize,
    start: usize,
    /// Its tokens, cut to the context.
    len: usize,
}

/// Windows of a prepared directory's conversations.
#[derive(Debug, Clone)]
pub struct ChatShards {
    shards: Vec<Arc<ShardFile>>,
    conversations: Vec<Span>,
    /// Each window's conversations, in order, together at most `context` tokens.
    windows: Vec<Window>,
    context: usize,
    vocab: usize,
    packing: Packing,
    /// Serve only this many windows, spread evenly (the held-out set); none: all of them.
    picks: Option<usize>,
}

impl ChatShards {
    /// True where the prepared directory `dir` holds chat data.
    pub fn is_chat(dir: &Path) -> bool {
        Manifest::read(dir).is_ok_and(|m| m.chat.is_some())
    }

    /// The training windows (`packing` as given) and held-out windows (one conversation each,
    /// at most `eval_size`) of the prepared directory `dir`, `context` tokens each.
    pub fn open(
        dir: &Path,
        context: usize,
        eval_size: usize,
        packing: Packing,
    ) -> Result<(Self, Self)> {
        let manifest = checked_manifest(dir)?;
        let train = Self::of(
            dir,
            &manifest,
            &manifest.train,
            context,
            packing,
            "training",
        )?;
        let eval = Self::held_out_of(dir, &manifest, context, eval_size)?;
        Ok((train, eval))
    }

    /// The held-out windows alone of the prepared directory `dir`.
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
        let entries = &manifest.held_out;
        let mut eval = Self::of(
            dir,
            manifest,
            entries,
            context,
            Packing::OneEach,
            "held-out",
        )?;
        if eval.windows.len() > eval_size {
            eval.picks = Some(eval_size.max(1));
        }
        Ok(eval)
    }

    fn of(
        dir: &Path,
        manifest: &Manifest,
        entries: &[ShardEntry],
        context: usize,
        packing: Packing,
        what: &str,
    ) -> Result<Self> {
        let shards = open_shards(dir, manifest, entries)?;
        let context = context.max(1);
        let mut conversations = Vec::new();
        let (mut cut, mut unscored) = (0, 0);
        for (at, shard) in shards.iter().enumerate() {
            let flags = shard.flags(0, shard.len()).ok_or_else(|| Error::Data {
                path: shard.path().to_owned(),
                detail: "a shard of text, not of conversations: no flags of scored tokens \
                         (prepare it with `headroom prepare --chat`)"
                    .into(),
            })?;
            let mut starts: Vec<usize> = (0..flags.len())
                .filter(|&i| flags[i] & STARTS_CONVERSATION != 0)
                .collect();
            starts.push(flags.len());
            for pair in starts.windows(2) {
                let (start, len) = (pair[0], pair[1] - pair[0]);
                cut += usize::from(len > context);
                let len = len.min(context);
                // The first token is never a target.
                if !flags[start + 1..start + len]
                    .iter()
                    .any(|f| f & SCORED != 0)
                {
                    unscored += 1;
                    continue;
                }
                conversations.push(Span {
                    shard: at,
                    start,
                    len,
                });
            }
        }
        if cut > 0 || unscored > 0 {
            tracing::warn!(
                "{what} conversations: {cut} longer than the context of {context} tokens, cut \
                 to it; {unscored} with no scored token within it, left out"
            );
        }
        if conversations.is_empty() {
            return Err(Error::Data {
                path: dir.to_owned(),
                detail: format!(
                    "the {what} shards hold no conversation with a scored token within the \
                     context of {context}"
                ),
            });
        }
        let windows = match packing {
            Packing::Packed => {
                let lengths: Vec<usize> = conversations.iter().map(|c| c.len).collect();
                pack(&lengths, context)
            }
            Packing::OneEach => one_each(conversations.len()),
        };
        Ok(Self {
            shards,
            conversations,
            windows,
            context,
            vocab: manifest.vocab as usize,
            packing,
            picks: None,
        })
    }

    /// Conversations in the windows.
    pub fn conversations(&self) -> usize {
        self.conversations.len()
    }
}

impl Dataset for ChatShards {
    fn len(&self) -> usize {
        self.picks.unwrap_or(self.windows.len())
    }

    fn shape(&self) -> DataShape {
        match self.packing {
            Packing::Packed => DataShape::packed_tokens(self.vocab, self.context),
            Packing::OneEach => DataShape::tokens(self.vocab, self.context),
        }
    }

    fn sample(&self, index: usize) -> Result<Sample> {
        let window = match self.picks {
            Some(picks) => index * self.windows.len() / picks,
            None => index,
        };
        let held: Vec<(Vec<u32>, Vec<u8>)> = self.conversations[self.windows[window].clone()]
            .iter()
            .map(|c| {
                let shard = &self.shards[c.shard];
                let flags = shard.flags(c.start, c.len).unwrap_or_default();
                (shard.tokens(c.start, c.len), flags.to_vec())
            })
            .collect();
        let arrays = assemble(&held, self.context, 0);
        Ok(match self.packing {
            Packing::Packed => Sample::new(vec![
                arrays.inputs.into(),
                arrays.targets.into(),
                arrays.starts.into(),
            ]),
            Packing::OneEach => Sample::tokens(arrays.inputs, arrays.targets),
        })
    }
}
