//! Generators of realistic allocation traces.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::TraceOp;
use super::rng::SplitMix64;
use crate::bookkeeping::tag::Tag;

/// The allocations of a GPT-style transformer's training steps, with f32 tensors.
///
/// Weights and optimizer state (two Adam moments) are allocated first and live throughout. Each
/// step loads a batch, allocates activations layer by layer in the forward pass (with attention
/// scratch space freed at once), then in the backward pass walks the layers in reverse: weight
/// gradients are allocated, activation gradients come and go, and the layer's activations are
/// freed. The optimizer step frees the gradients and the batch.
///
/// ```
/// use headroom_alloc::trace::{TraceOp, TransformerTrace};
/// let ops = TransformerTrace::default().with_batch(2).generate();
/// let allocs = ops.iter().filter(|op| matches!(op, TraceOp::Alloc { .. })).count();
/// assert_eq!(allocs * 2, ops.len()); // everything is freed by the end
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransformerTrace {
    /// Transformer blocks.
    pub layers: u64,
    /// Model width.
    pub hidden: u64,
    /// Attention heads.
    pub heads: u64,
    /// Sequence length.
    pub seq: u64,
    /// Sequences per batch.
    pub batch: u64,
    /// Vocabulary size.
    pub vocab: u64,
    /// Training steps.
    pub steps: u64,
}

impl Default for TransformerTrace {
    /// A small GPT: 4 layers, width 256, 4 heads, 128 tokens, batch 8, 8192 words, 2 steps.
    fn default() -> Self {
        Self {
            layers: 4,
            hidden: 256,
            heads: 4,
            seq: 128,
            batch: 8,
            vocab: 8192,
            steps: 2,
        }
    }
}

/// Builds a trace with fresh ids.
#[derive(Default)]
struct TraceBuilder {
    ops: Vec<TraceOp>,
    next_id: u64,
}

impl TraceBuilder {
    fn alloc(&mut self, elements: u64, tag: Tag) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.ops.push(TraceOp::Alloc {
            id,
            size: elements * 4,
            tag,
        });
        id
    }

    fn free(&mut self, id: u64) {
        self.ops.push(TraceOp::Free { id });
    }
}

impl TransformerTrace {
    /// The same model with another batch size.
    pub fn with_batch(mut self, batch: u64) -> Self {
        self.batch = batch;
        self
    }

    /// Parameter tensor sizes in elements: embeddings, then per layer, then the final norm.
    fn parameter_shapes(&self) -> Vec<u64> {
        let h = self.hidden;
        let mut shapes = vec![self.vocab * h, self.seq * h];
        for _ in 0..self.layers {
            shapes.extend([
                2 * h,
                3 * h * h,
                3 * h,
                h * h,
                h,
                2 * h,
                4 * h * h,
                4 * h,
                4 * h * h,
                h,
            ]);
        }
        shapes.push(2 * h);
        shapes
    }

    /// The trace.
    pub fn generate(&self) -> Vec<TraceOp> {
        let mut trace = TraceBuilder::default();
        let shapes = self.parameter_shapes();
        let weights: Vec<u64> = shapes
            .iter()
            .map(|&n| trace.alloc(n, Tag::WEIGHTS))
            .collect();
        let moments: Vec<u64> = shapes
            .iter()
            .flat_map(|&n| [n, n])
            .map(|n| trace.alloc(n, Tag::OPTIMIZER_STATE))
            .collect();
        let tokens = self.batch * self.seq;
        let bsh = tokens * self.hidden;
        let scores = self.batch * self.heads * self.seq * self.seq;
        let per_layer = shapes.len().saturating_sub(3) / self.layers.max(1) as usize;
        for _ in 0..self.steps {
            let inputs = trace.alloc(tokens, Tag::DATA);
            let targets = trace.alloc(tokens, Tag::DATA);
            let embedded = trace.alloc(bsh, Tag::ACTIVATIONS);
            let mut saved: Vec<Vec<u64>> = Vec::new();
            for _ in 0..self.layers {
                let mut layer = Vec::new();
                layer.push(trace.alloc(bsh, Tag::ACTIVATIONS)); // norm 1
                layer.push(trace.alloc(3 * bsh, Tag::ACTIVATIONS)); // q, k, v
                layer.push(trace.alloc(scores, Tag::ACTIVATIONS)); // scores
                let scratch = trace.alloc(scores, Tag::WORKSPACE); // softmax scratch
                trace.free(scratch);
                layer.push(trace.alloc(scores, Tag::ACTIVATIONS)); // probabilities
                layer.push(trace.alloc(bsh, Tag::ACTIVATIONS)); // attention output
                layer.push(trace.alloc(bsh, Tag::ACTIVATIONS)); // projection + residual
                layer.push(trace.alloc(bsh, Tag::ACTIVATIONS)); // norm 2
                layer.push(trace.alloc(4 * bsh, Tag::ACTIVATIONS)); // MLP up
                layer.push(trace.alloc(4 * bsh, Tag::ACTIVATIONS)); // GELU
                layer.push(trace.alloc(bsh, Tag::ACTIVATIONS)); // MLP down + residual
                saved.push(layer);
            }
            let normed = trace.alloc(bsh, Tag::ACTIVATIONS);
            let logits = trace.alloc(tokens * self.vocab, Tag::ACTIVATIONS);
            let loss = trace.alloc(1, Tag::ACTIVATIONS);
            // Backward.
            let grad_logits = trace.alloc(tokens * self.vocab, Tag::WORKSPACE);
            trace.free(loss);
            trace.free(logits);
            let mut grads = vec![trace.alloc(2 * self.hidden, Tag::GRADIENTS)];
            let mut upstream = trace.alloc(bsh, Tag::WORKSPACE);
            trace.free(grad_logits);
            trace.free(normed);
            for (layer_index, layer) in saved.into_iter().enumerate().rev() {
                let first = 2 + layer_index * per_layer;
                for &n in shapes[first..first + per_layer].iter().rev() {
                    grads.push(trace.alloc(n, Tag::GRADIENTS));
                }
                for id in layer.into_iter().rev() {
                    let grad = trace.alloc(bsh, Tag::WORKSPACE);
                    trace.free(upstream);
                    upstream = grad;
                    trace.free(id);
                }
            }
            grads.push(trace.alloc(shapes[1], Tag::GRADIENTS));
            grads.push(trace.alloc(shapes[0], Tag::GRADIENTS));
            trace.free(upstream);
            trace.free(embedded);
            trace.free(targets);
            trace.free(inputs);
            // Optimizer step, then zero_grad(set_to_none).
            for id in grads {
                trace.free(id);
            }
        }
        for id in moments.into_iter().chain(weights).rev() {
            trace.free(id);
        }
        trace.ops
    }
}

/// Random sizes from a log-normal distribution with exponentially distributed lifetimes.
///
/// ```
/// use headroom_alloc::trace::LogNormalTrace;
/// let a = LogNormalTrace::default().generate();
/// assert_eq!(a, LogNormalTrace::default().generate()); // reproducible from the seed
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogNormalTrace {
    /// Allocations in the trace.
    pub allocations: u64,
    /// Median size in bytes.
    pub median_size: f64,
    /// Standard deviation of the size's natural logarithm.
    pub sigma: f64,
    /// Mean lifetime, in allocations.
    pub mean_lifetime: f64,
    /// Multiplies every size (the scale of a fit search).
    pub scale: f64,
    /// Random seed.
    pub seed: u64,
}

impl Default for LogNormalTrace {
    /// 20 000 allocations, median 64 KiB, sigma 2, mean lifetime 100 allocations.
    fn default() -> Self {
        Self {
            allocations: 20_000,
            median_size: 65_536.0,
            sigma: 2.0,
            mean_lifetime: 100.0,
            scale: 1.0,
            seed: 0x4EAD_4005,
        }
    }
}

impl LogNormalTrace {
    /// The same trace with sizes multiplied by `scale`.
    pub fn with_scale(mut self, scale: f64) -> Self {
        self.scale = scale;
        self
    }

    /// The trace; every allocation is freed by the end.
    pub fn generate(&self) -> Vec<TraceOp> {
        let mut rng = SplitMix64::new(self.seed);
        let mut deaths: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
        let mut ops = Vec::new();
        for id in 0..self.allocations {
            while let Some(&Reverse((death, dead))) = deaths.peek() {
                if death > id {
                    break;
                }
                deaths.pop();
                ops.push(TraceOp::Free { id: dead });
            }
            let size = (self.median_size * (self.sigma * rng.normal()).exp() * self.scale)
                .clamp(1.0, 1e15) as u64;
            let tag = Tag::BUILTIN[rng.below(Tag::BUILTIN.len() as u64) as usize];
            ops.push(TraceOp::Alloc { id, size, tag });
            let lifetime = rng.exponential(self.mean_lifetime).ceil() as u64;
            deaths.push(Reverse((id + lifetime.max(1), id)));
        }
        while let Some(Reverse((_, dead))) = deaths.pop() {
            ops.push(TraceOp::Free { id: dead });
        }
        ops
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Every id is allocated once, freed once after its allocation, and nothing leaks.
    fn assert_well_formed(ops: &[TraceOp]) {
        let mut live = HashSet::new();
        for op in ops {
            match *op {
                TraceOp::Alloc { id, size, .. } => {
                    assert!(size > 0);
                    assert!(live.insert(id), "id {id} allocated twice");
                }
                TraceOp::Free { id } => assert!(live.remove(&id), "id {id} freed while not live"),
                TraceOp::Oom { .. } => panic!("a generated trace records no failed request"),
            }
        }
        assert!(live.is_empty(), "{} allocations leak", live.len());
    }

    #[test]
    fn transformer_trace_is_well_formed_and_grows_with_batch() {
        let small = TransformerTrace::default().with_batch(1).generate();
        let large = TransformerTrace::default().with_batch(4).generate();
        assert_well_formed(&small);
        assert_well_formed(&large);
        let bytes = |ops: &[TraceOp]| -> u64 {
            ops.iter()
                .map(|op| match op {
                    TraceOp::Alloc { size, .. } => *size,
                    TraceOp::Free { .. } | TraceOp::Oom { .. } => 0,
                })
                .sum()
        };
        assert!(bytes(&large) > bytes(&small));
        assert_eq!(small.len(), large.len());
    }

    #[test]
    fn lognormal_trace_is_well_formed_with_a_median_near_its_setting() {
        let trace = LogNormalTrace::default();
        let ops = trace.generate();
        assert_well_formed(&ops);
        let mut sizes: Vec<u64> = ops
            .iter()
            .filter_map(|op| match op {
                TraceOp::Alloc { size, .. } => Some(*size),
                TraceOp::Free { .. } | TraceOp::Oom { .. } => None,
            })
            .collect();
        sizes.sort_unstable();
        let median = sizes[sizes.len() / 2] as f64;
        assert!(
            (median / trace.median_size - 1.0).abs() < 0.1,
            "median {median}"
        );
    }
}
