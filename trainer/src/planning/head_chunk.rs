//! The fused head's chunk: how many rows of tokens a GPT's head and loss form logits for at a
//! time. A larger chunk runs the head's products on larger matrices, and holds more logits.
//!
//! The rule: memory goes to samples first and to the chunk second. The planner finds the
//! largest micro-batch with the smallest chunk ([`MIN_LOGITS`] logits, at least one row), then
//! takes the largest chunk, the device's [`most_logits`] (by then a chunk's products are large
//! enough to run at full speed) or every row of the micro-batch, whichever is fewer, where
//! that micro-batch's step still fits with it; else it doubles the chunk from the smallest
//! while the step fits. Where the whole batch fits one micro-batch with the largest chunk,
//! that one probe settles both. A chunk the configuration sets (`model.head_chunk`) is taken
//! as it is.

use headroom_kernels::PlanTarget;

/// Logits of the smallest chunk the planner tries (4 MiB in f32).
pub const MIN_LOGITS: usize = 1 << 20;

/// Logits of the largest chunk it grows to on the CPU (32 MiB in f32), a GPT's own default.
pub const MAX_LOGITS: usize = headroom_nn::HEAD_CHUNK_LOGITS;

/// Logits of the largest chunk on a GPU (128 MiB in f32): GPT-2's head then runs products of
/// 667 rows, which fill an H100's or H200's matrix units where 166 rows leave them idle most
/// of the time (the head's products ran at 58 TFLOP/s on an H200 in chunks of 166 rows).
pub const MAX_GPU_LOGITS: usize = 4 * MAX_LOGITS;

/// The largest chunk's logits on the device that `target` plans for.
pub fn most_logits(target: PlanTarget) -> usize {
    match target {
        PlanTarget::Cpu => MAX_LOGITS,
        PlanTarget::Cuda { .. } => MAX_GPU_LOGITS,
    }
}

/// The smallest chunk for a vocabulary of `vocab` tokens, in rows.
pub fn smallest(vocab: usize) -> usize {
    (MIN_LOGITS / vocab.max(1)).max(1)
}

/// The chunks to try after `smallest(vocab)`, in order, for micro-batches of `rows` rows of
/// tokens: each twice the one before, the last cut to `most_logits` or the micro-batch.
pub fn larger(vocab: usize, rows: usize, most_logits: usize) -> Vec<usize> {
    let cap = (most_logits / vocab.max(1)).max(1).min(rows.max(1));
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
        let cpu = most_logits(PlanTarget::Cpu);
        assert_eq!(larger(50_257, 4 * 1024, cpu), [40, 80, 160, 166]);
        // A GPU's products want more rows: up to 667 (32 Mi logits).
        let gpu = most_logits(PlanTarget::Cuda { gemm_workspace: 0 });
        assert_eq!(larger(50_257, 8 * 1024, gpu), [40, 80, 160, 320, 640, 667]);
        // A micro-batch of fewer rows caps it.
        assert_eq!(larger(50_257, 60, cpu), [40, 60]);
        assert_eq!(larger(50_257, 10, gpu), Vec::<usize>::new());
        // A small vocabulary fits a micro-batch in one chunk at once.
        assert_eq!(smallest(13), MIN_LOGITS / 13);
        assert_eq!(larger(13, 500, cpu), Vec::<usize>::new());
    }
}
