//! Choosing the next token from a model's logits: greedy, or drawn from the softmax at a
//! temperature after top-k and nucleus (top-p) filtering, reproducibly from a seed.

use headroom_kernels::ops::random::uniform;

use crate::error::{Error, Result};

/// How to choose the next token from logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// The logits are divided by it before the softmax: below 1 sharpens, above 1 flattens;
    /// 0 picks the most likely token (greedy, the lowest id on ties). Finite, at least 0.
    pub temperature: f64,
    /// Draw only from the `k` most likely tokens (at least 1); none: every token.
    pub top_k: Option<usize>,
    /// Draw only from the smallest set of most likely tokens whose probability reaches `p`
    /// (in `(0, 1]`, the nucleus); none: every token.
    pub top_p: Option<f64>,
}

impl Default for Sampling {
    /// The model's own distribution: temperature 1, no filtering.
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: None,
            top_p: None,
        }
    }
}

impl Sampling {
    /// Always the most likely token.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Checks that the numbers make sense; the error names the first that does not.
    pub fn validate(&self) -> Result<()> {
        let t = self.temperature;
        if !t.is_finite() || t < 0.0 {
            return Err(Error::config(
                "sampling",
                format!("temperature {t} is not finite and at least 0"),
            ));
        }
        if self.top_k == Some(0) {
            return Err(Error::config("sampling", "top_k 0: at least 1 is needed"));
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return Err(Error::config(
                "sampling",
                format!("top_p {p} is not in (0, 1]"),
            ));
        }
        Ok(())
    }

    /// True when the choice is the most likely token, whatever the draw.
    fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_k == Some(1)
    }
}

/// Draws tokens by a [`Sampling`], reproducibly: the same seed and logits give the same tokens.
///
/// ```
/// use headroom_nn::{Sampler, Sampling};
/// let mut greedy = Sampler::new(Sampling::greedy(), 7)?;
/// assert_eq!(greedy.next(&[0.5, 2.0, -1.0])?, 1);
/// let top1 = Sampling { temperature: 5.0, top_k: Some(1), top_p: None };
/// assert_eq!(Sampler::new(top1, 7)?.next(&[0.5, 2.0, -1.0])?, 1);
/// # Ok::<(), headroom_nn::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Sampler {
    /// Validated.
    sampling: Sampling,
    /// Seeds the counter-based generator.
    seed: u64,
    /// Uniform numbers drawn so far: the index of the next.
    draws: u64,
}

impl Sampler {
    /// A sampler by `sampling` (validated) whose draws follow from `seed`.
    pub fn new(sampling: Sampling, seed: u64) -> Result<Self> {
        sampling.validate()?;
        Ok(Self {
            sampling,
            seed,
            draws: 0,
        })
    }

    /// Its sampling.
    pub fn sampling(&self) -> &Sampling {
        &self.sampling
    }

    /// The next token for `logits` (one per token id): the most likely when greedy, otherwise
    /// drawn from `softmax(logits / temperature)` restricted to the top `k`, then to the
    /// nucleus of probability `p` of those. Fails on no logits or a logit that is not finite.
    pub fn next(&mut self, logits: &[f32]) -> Result<u32> {
        let count = match u32::try_from(logits.len()) {
            Ok(count) if count > 0 => count,
            _ => {
                let detail = format!("{} logits: expected 1 to 2^32 - 1", logits.len());
                return Err(Error::config("sampling logits", detail));
            }
        };
        if let Some((id, l)) = logits.iter().enumerate().find(|(_, l)| !l.is_finite()) {
            let detail = format!("logit {id} is {l}, not finite");
            return Err(Error::config("sampling logits", detail));
        }
        // Token ids, most likely first, the lowest id first among equals.
        let mut order: Vec<u32> = (0..count).collect();
        order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        let best = order.first().copied().unwrap_or(0);
        if self.sampling.is_greedy() {
            return Ok(best);
        }
        order.truncate(self.sampling.top_k.unwrap_or(order.len()));
        let max = f64::from(logits[best as usize]);
        let t = self.sampling.temperature;
        let mut probs: Vec<f64> = order
            .iter()
            .map(|&id| ((f64::from(logits[id as usize]) - max) / t).exp())
            .collect();
        normalize(&mut probs);
        if let Some(p) = self.sampling.top_p {
            probs.truncate(nucleus(&probs, p));
            normalize(&mut probs);
        }
        let u = uniform(self.seed, self.draws);
        self.draws += 1;
        let mut below = 0.0;
        for (&id, &prob) in order.iter().zip(&probs) {
            below += prob;
            if u < below {
                return Ok(id);
            }
        }
        // Rounding left the sum a hair under 1 and `u` above it: the last kept token.
        Ok(order
            .get(probs.len().saturating_sub(1))
            .copied()
            .unwrap_or(best))
    }
}

/// Scales `probs` (positive, the first at least 1) to sum to 1.
fn normalize(probs: &mut [f64]) {
    let sum: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|q| *q /= sum);
}

/// The number of leading `probs` (sorted, most likely first) whose sum first reaches `p`:
/// at least 1, all of them when rounding keeps the sum under `p`.
fn nucleus(probs: &[f64], p: f64) -> usize {
    let mut sum = 0.0;
    for (i, q) in probs.iter().enumerate() {
        sum += q;
        if sum >= p {
            return i + 1;
        }
    }
    probs.len()
}
