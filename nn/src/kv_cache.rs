//! The keys and values a GPT has computed for the tokens it has seen, kept so that generating
//! the next token costs one token's work plus attention over the prefix
//! ([`Gpt::forward_cached`](crate::Gpt::forward_cached)).

use headroom_autograd::Tensor;

/// One block's keys and values of the positions seen so far.
#[derive(Debug, Clone)]
pub(crate) struct BlockKv {
    /// `[batch, heads, len, head]`, one row per position in order from position 0.
    pub keys: Tensor,
    /// `[batch, heads, len, head]`, the shape of `keys`, the rows in the same order.
    pub values: Tensor,
}

impl BlockKv {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.keys.dims().get(2).copied().unwrap_or(0)
    }
}

/// The keys and values of every block of a GPT for the positions seen so far, in the device
/// memory of the model (so they count against its limit like any other tensor). Made by
/// [`Gpt::kv_cache`](crate::Gpt::kv_cache) and grown by
/// [`Gpt::forward_cached`](crate::Gpt::forward_cached), which leaves it unchanged when it
/// fails.
#[derive(Debug, Clone)]
pub struct KvCache {
    /// One entry per block of the model, in order; all none while `len == 0`, all some
    /// otherwise, each of `batch` rows and `len` positions.
    blocks: Vec<Option<BlockKv>>,
    /// Sequences cached side by side: the first dimension of every cached tensor and of the
    /// ids each forward pass takes. Fixed at creation.
    batch: usize,
    /// Positions cached: the third dimension of every cached tensor, and the position the next
    /// token takes. At most the model's context.
    len: usize,
}

impl KvCache {
    /// An empty cache for a model of `blocks` blocks and `batch` sequences.
    pub(crate) fn new(blocks: usize, batch: usize) -> Self {
        Self {
            blocks: vec![None; blocks],
            batch,
            len: 0,
        }
    }

    /// Positions cached: the position the next token takes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True before the first token.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sequences cached side by side.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Device bytes the cached keys and values hold (as reserved by the allocator).
    pub fn bytes(&self) -> usize {
        self.blocks
            .iter()
            .flatten()
            .flat_map(|kv| [&kv.keys, &kv.values])
            .map(|t| t.array().buffer().reserved_bytes())
            .sum()
    }

    /// Forgets every position (and frees their memory): the next token takes position 0.
    pub fn clear(&mut self) {
        self.blocks.iter_mut().for_each(|kv| *kv = None);
        self.len = 0;
    }

    /// Number of blocks the cache is for.
    pub(crate) fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Block `i`'s keys and values; none while empty.
    pub(crate) fn block(&self, i: usize) -> Option<&BlockKv> {
        self.blocks.get(i).and_then(Option::as_ref)
    }

    /// Replaces every block's keys and values by `blocks` (one per block, each holding the
    /// cached positions and `added` more).
    pub(crate) fn commit(&mut self, blocks: Vec<BlockKv>, added: usize) {
        self.blocks = blocks.into_iter().map(Some).collect();
        self.len += added;
    }
}
