//! What a backend runs for memory-efficient attention (FlashAttention-2, Dao 2023): the
//! product of queries and keys, its softmax and the product with the values, computed block by
//! block with an online softmax, so that the `len x len` weights never exist in memory.

use std::ops::Range;

use crate::buffer::Buffer;
use crate::error::Result;

/// Dropout on the attention weights: each weight is kept with probability `1 - p` and scaled
/// by `1 / (1 - p)`, its mask drawn from `seed` at the weight's index in a `[heads, len, len]`
/// array ([`crate::ops::random::keeps`]), as dropout on the materialized weights draws it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionDropout {
    /// The probability of dropping a weight, in `[0, 1)`.
    pub p: f64,
    /// The mask's seed.
    pub seed: u64,
}

/// The geometry of one attention: `heads` independent query heads (batch times heads), each over
/// `len` positions of `head` features; queries and the output are contiguous `[heads, len,
/// head]`, the log-sum-exp of each row `[heads, len]` in f32. Keys and values are `[heads /
/// group, len, head]`: query head `h` reads key/value head `h / group` in place (grouped-query
/// attention; a group of 1 is multi-head attention).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionSpec {
    /// Independent query heads: batch times heads.
    pub heads: usize,
    /// Query heads per key/value head, at least 1; it divides `heads`.
    pub group: usize,
    /// Positions (queries and keys alike: self-attention).
    pub len: usize,
    /// Features per head.
    pub head: usize,
    /// The scores' factor, usually `1 / sqrt(head)`.
    pub scale: f64,
    /// Position `i` attends only to positions `0..=i`.
    pub causal: bool,
    /// With `causal`, position `i` attends only to the last `window` of those: keys `j` with
    /// `i - window < j <= i`, at least 1. The op layer leaves it out where it keeps every
    /// causal key (`window >= len`); ignored without `causal`.
    pub window: Option<usize>,
    /// Dropout on the weights, if any.
    pub dropout: Option<AttentionDropout>,
    /// With `causal`, packed documents: the rows of the document starts (`[rows, len]`), query
    /// head `h` in row `h / (heads / rows)` seeing only the keys of its own document. The
    /// operands then hold the starts.
    pub documents: Option<usize>,
}

impl AttentionSpec {
    /// Elements of a `[heads, len, head]` operand (the queries, the output).
    pub fn elements(&self) -> usize {
        self.heads * self.len * self.head
    }

    /// Key/value heads: `heads / group`.
    pub fn kv_heads(&self) -> usize {
        self.heads / self.group.max(1)
    }

    /// The key/value head that query head `head` reads.
    pub fn kv_head_of(&self, head: usize) -> usize {
        head / self.group.max(1)
    }

    /// Rows of the log-sum-exp: `heads * len`.
    pub fn rows(&self) -> usize {
        self.heads * self.len
    }

    /// Query heads per row of the document starts (1 without documents).
    pub fn heads_per_row(&self) -> usize {
        self.heads / self.documents.unwrap_or(self.heads).max(1)
    }

    /// The keys `query` sees: all of them, or with `causal` those up to itself, and with a
    /// window only the last `window` of those.
    pub fn keys_of(&self, query: usize) -> Range<usize> {
        if !self.causal {
            return 0..self.len;
        }
        let first = self.window.map_or(0, |w| (query + 1).saturating_sub(w));
        first..query + 1
    }

    /// The queries that see `key`: all of them, or with `causal` those from it on, and with a
    /// window only the first `window` of those.
    pub fn queries_of(&self, key: usize) -> Range<usize> {
        if !self.causal {
            return 0..self.len;
        }
        let end = self.window.map_or(self.len, |w| key.saturating_add(w));
        key..end.min(self.len)
    }

    /// The scores each head computes, those its mask hides skipped: `len^2`, half of that when
    /// causal (a round figure, `len / 2` under the exact count), and with a window exactly the
    /// sum over the rows `i` of `min(i + 1, window)`.
    pub fn scores_per_head(&self) -> f64 {
        let len = self.len as f64;
        match (self.causal, self.window) {
            (false, _) => len * len,
            (true, None) => 0.5 * len * len,
            (true, Some(w)) => {
                // Rows before the window fills see i + 1 keys, the rest `window` each.
                let w = w.min(self.len) as f64;
                0.5 * w * (w + 1.0) + (len - w) * w
            }
        }
    }
}

/// The operands of [`AttentionKernels::attention`]: contiguous, of one float dtype but the
/// log-sum-exp; queries and output `[heads, len, head]`, keys and values `[heads / group, len,
/// head]`.
#[derive(Debug)]
pub struct AttentionOperands<'a> {
    /// The queries.
    pub q: &'a Buffer,
    /// The keys.
    pub k: &'a Buffer,
    /// The values.
    pub v: &'a Buffer,
    /// The document starts, `[rows, len]` U32, where the spec has documents.
    pub starts: Option<&'a Buffer>,
    /// Receives the output.
    pub out: &'a mut Buffer,
    /// Receives the log-sum-exp of each row of the scores, `[heads, len]` in f32.
    pub lse: &'a mut Buffer,
}

/// The operands of [`AttentionKernels::attention_backward`]: contiguous, of one float dtype
/// but the log-sum-exp; the keys, values and their gradients `[heads / group, len, head]`, the
/// rest `[heads, len, head]`.
#[derive(Debug)]
pub struct AttentionBackwardOperands<'a> {
    /// The queries.
    pub q: &'a Buffer,
    /// The keys.
    pub k: &'a Buffer,
    /// The values.
    pub v: &'a Buffer,
    /// The document starts, `[rows, len]` U32, where the spec has documents.
    pub starts: Option<&'a Buffer>,
    /// The forward pass's output.
    pub out: &'a Buffer,
    /// The forward pass's log-sum-exp of each row, `[heads, len]` in f32.
    pub lse: &'a Buffer,
    /// The upstream gradient of the output.
    pub dout: &'a Buffer,
    /// Receives the queries' gradient.
    pub dq: &'a mut Buffer,
    /// Receives the keys' gradient: for each key/value head, the sum over its group's query
    /// heads, in their order.
    pub dk: &'a mut Buffer,
    /// Receives the values' gradient, summed over each group as `dk`.
    pub dv: &'a mut Buffer,
}

/// The kernels of this family that a backend runs. Every buffer is contiguous and row-major,
/// in one float dtype (the log-sum-exp in f32); the op layer has checked lengths, dtypes and
/// devices before calling.
pub trait AttentionKernels {
    /// `out = dropout(softmax(scale * q k^T, masked)) v` for every head, and the log-sum-exp of
    /// each row of the masked, scaled scores into `lse` (what the backward pass needs besides
    /// the operands and the output).
    fn attention(&self, spec: &AttentionSpec, operands: AttentionOperands<'_>) -> Result<()>;

    /// The gradients of [`AttentionKernels::attention`] with respect to `q`, `k` and `v`, from
    /// them and what the forward pass saved (the output, its log-sum-exp) and the upstream
    /// gradient of the output; the scores and weights are computed again block by block.
    fn attention_backward(
        &self,
        spec: &AttentionSpec,
        operands: AttentionBackwardOperands<'_>,
    ) -> Result<()>;
}
