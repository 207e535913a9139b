//! The fused head's chunk: how many rows of tokens a GPT's head and loss form logits for at a
//! time. A larger chunk runs the head's products on larger matrices, and holds more logits.
//!
//! The rule: memory goes to samples first and to the chunk second. The planner finds the
//! largest micro-batch with the smallest chunk ([`MIN_LOGITS`] logits, at least one row), then
//! doubles the chunk while that micro-batch's step still fits, up to [`MAX_LOGITS`] logits (by
//! then a chunk's products are large enough to run at full speed) or every row of the
//! micro-batch, whichever is fewer. A chunk the configuration sets (`model.head_chunk`) is
//! taken as it is.

/// Logits of the smallest chunk the planner tries (4 MiB in f32).
pub const MIN_LOGITS: usize = 1 << 20;

/// Logits of the largest chunk it grows to (32 MiB in f32), a GPT's own default.
pub const MAX_LOGITS: usize = headroom_nn::HEAD_CHUNK_LOGITS;

/// The smallest chunk for a vocabulary of `vocab` tokens, in rows.
pub fn smallest(vocab: usize) -> usize {
    (MIN_LOGITS / vocab.max(1)).max(1)
}

/// The chunks to try after `smallest(vocab)`, in order, for micro-batches of `rows` rows of
/// tokens: each twice the one before, the last cut to the cap.
pub fn larger(vocab: usize, rows: usize) -> Vec<usize> {
    let cap = (MAX_LOGITS / vocab.max(1)).max(1).min(rows.max(1));
    let mut sizes = Vec::new();
    let mut size = smallest(vocab);
    while size < cap {
        size = (2 * size).min(cap);
        sizes.push(size);
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_double_from_a_mebi_logit_to_the_cap_or_the_micro_batch() {
        // GPT-2's vocabulary: 20 rows, then doubling up to 166 rows (8 Mi logits).
        assert_eq!(smallest(50_257), 20);
        assert_eq!(larger(50_257, 4 * 1024), [40, 80, 160, 166]);
        // A micro-batch of fewer rows caps it.
        assert_eq!(larger(50_257, 60), [40, 60]);
        assert_eq!(larger(50_257, 10), Vec::<usize>::new());
        // A small vocabulary fits a micro-batch in one chunk at once.
        assert_eq!(smallest(13), MIN_LOGITS / 13);
        assert_eq!(larger(13, 500), Vec::<usize>::new());
    }
}
