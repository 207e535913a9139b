//! Uniform random tokens: windows of a model's context, each token drawn uniformly from its
//! vocabulary by a seeded generator, each predicting the next. Nothing can be learned from
//! them; they let any shape be planned and measured (memory, speed) without a corpus.

use headroom_kernels::ops::random::uniform;

use super::{DataShape, Dataset, Sample};
use crate::error::Result;

/// `count` windows of `context` tokens below `vocab`, drawn from `seed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniformTokens {
    vocab: usize,
    context: usize,
    count: usize,
    seed: u64,
}

impl UniformTokens {
    /// `count` windows of `context` tokens below `vocab` (at least 1), from `seed`: the
    /// training ones, or with `held_out` others.
    pub fn new(vocab: usize, context: usize, count: usize, seed: u64, held_out: bool) -> Self {
        Self {
            vocab: vocab.max(1),
            context,
            count,
            seed: seed ^ if held_out { 0x0E7A_1F0B } else { 0x7EA1_F0B5 },
        }
    }

    /// Token `position` of the stream of window `index` (a window reads `context + 1`).
    fn token(&self, index: usize, position: usize) -> u32 {
        let at = (index as u64) * (self.context as u64 + 1) + position as u64;
        ((uniform(self.seed, at) * self.vocab as f64) as usize).min(self.vocab - 1) as u32
    }
}

impl Dataset for UniformTokens {
    fn len(&self) -> usize {
        self.count
    }

    fn shape(&self) -> DataShape {
        DataShape::tokens(self.vocab, self.context)
    }

    fn sample(&self, index: usize) -> Result<Sample> {
        let stream: Vec<u32> = (0..=self.context).map(|p| self.token(index, p)).collect();
        Ok(Sample::tokens(
            stream[..self.context].to_vec(),
            stream[1..].to_vec(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_seeded_uniform_and_predict_their_next_token() {
        let data = UniformTokens::new(50, 16, 200, 3, false);
        let sample = data.sample(7).unwrap();
        let ids = sample.arrays()[0].as_u32().unwrap();
        let targets = sample.arrays()[1].as_u32().unwrap();
        assert_eq!((ids.len(), targets.len()), (16, 16));
        assert_eq!(ids[1..], targets[..15], "each token predicts the next");
        assert_eq!(data.sample(7).unwrap(), sample, "seeded");
        let held_out = UniformTokens::new(50, 16, 200, 3, true).sample(7);
        assert_ne!(held_out.unwrap(), sample);
        let mut counts = [0usize; 50];
        for i in 0..200 {
            let sample = data.sample(i).unwrap();
            for &id in sample.arrays()[0].as_u32().unwrap() {
                counts[id as usize] += 1;
            }
        }
        // 3200 draws over 50 tokens: 64 each on average; every token appears, none dominates.
        assert!(counts.iter().all(|&c| (30..110).contains(&c)), "{counts:?}");
    }
}
