//! The synthetic addition task: `123+4567=` and the digits of the sum, least significant first.
//!
//! Operands have 1 to `digits` digits (each length equally likely) and are right-aligned in
//! `digits` slots, blanks on the left, so that digits of equal weight sit at the same positions
//! (`" 123+4567="`), as arithmetic-transformer studies do; the answer is the sum's `digits + 1`
//! digits reversed (`"09640"` for 4690), which lets a causal model carry from the right.
//! One problem in 50 (by a hash of the operands) is held out: the training set never contains
//! an evaluation problem.

use headroom_kernels::ops::random::uniform;

use super::{DataShape, Dataset, IGNORE, Sample};
use crate::error::Result;

/// The `+` token.
pub const PLUS: u32 = 10;
/// The `=` token.
pub const EQUALS: u32 = 11;
/// The blank that right-aligns operands.
pub const BLANK: u32 = 12;
/// Held out: problems whose hash is divisible by this.
const HELD_OUT_ONE_IN: u64 = 50;

/// Addition problems, generated from a seed (training or held-out ones).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addition {
    digits: u32,
    len: usize,
    seed: u64,
    held_out: bool,
}

impl Addition {
    /// `len` problems of operands up to `digits` digits drawn from `seed`: the training ones, or
    /// with `held_out` the evaluation ones.
    pub fn new(digits: u32, len: usize, seed: u64, held_out: bool) -> Self {
        Self {
            digits,
            len,
            seed: seed ^ if held_out { 0xE7A1 } else { 0x7EA1 },
            held_out,
        }
    }

    /// The operands of problem `index`.
    pub fn operands(&self, index: usize) -> (u64, u64) {
        (0u64..)
            .map(|attempt| self.draw(index as u64, attempt))
            .find(|&(a, b)| is_held_out(a, b) == self.held_out)
            .unwrap_or((0, 0))
    }

    fn draw(&self, index: u64, attempt: u64) -> (u64, u64) {
        let base = (index << 24) + attempt * 4;
        let operand = |k: u64| {
            let digits = 1 + (uniform(self.seed, base + k) * f64::from(self.digits)) as u32;
            let low = if digits == 1 {
                0
            } else {
                10u64.pow(digits - 1)
            };
            let span = 10u64.pow(digits) - low;
            low + (uniform(self.seed, base + k + 2) * span as f64) as u64
        };
        (operand(0), operand(1))
    }

    /// Tokens of the prompt `" 123+4567="`.
    pub fn prompt(&self, a: u64, b: u64) -> Vec<u32> {
        let mut tokens = self.aligned(a);
        tokens.push(PLUS);
        tokens.extend(self.aligned(b));
        tokens.push(EQUALS);
        tokens
    }

    /// The answer tokens: the sum's digits, least significant first.
    pub fn answer(&self, a: u64, b: u64) -> Vec<u32> {
        let sum = a + b;
        (0..=self.digits)
            .map(|k| ((sum / 10u64.pow(k)) % 10) as u32)
            .collect()
    }

    fn aligned(&self, n: u64) -> Vec<u32> {
        let text = n.to_string();
        let blanks = self.digits as usize - text.len();
        std::iter::repeat_n(BLANK, blanks)
            .chain(text.bytes().map(|b| u32::from(b - b'0')))
            .collect()
    }

    /// A problem as text, for logs: `" 123+4567=09640"`.
    pub fn render(tokens: &[u32]) -> String {
        tokens
            .iter()
            .map(|&t| match t {
                0..=9 => char::from(b'0' + t as u8),
                PLUS => '+',
                EQUALS => '=',
                _ => ' ',
            })
            .collect()
    }
}

/// Whether a problem belongs to the held-out set.
fn is_held_out(a: u64, b: u64) -> bool {
    (uniform(0x5EED, a.wrapping_mul(1_000_003) ^ b).to_bits() >> 11).is_multiple_of(HELD_OUT_ONE_IN)
}

impl Dataset for Addition {
    fn len(&self) -> usize {
        self.len
    }

    fn shape(&self) -> DataShape {
        // The prompt and all but the last answer digit are read.
        let len = 2 * self.digits as usize + 2 + self.digits as usize;
        DataShape::tokens(13, len)
    }

    fn sample(&self, index: usize) -> Result<Sample> {
        let (a, b) = self.operands(index);
        let prompt = self.prompt(a, b);
        let answer = self.answer(a, b);
        let mut sequence = prompt.clone();
        sequence.extend(&answer);
        let ids = sequence[..sequence.len() - 1].to_vec();
        // Position p predicts token p + 1; only the answer counts.
        let targets = (0..ids.len())
            .map(|p| {
                if p + 1 >= prompt.len() {
                    sequence[p + 1]
                } else {
                    IGNORE
                }
            })
            .collect();
        Ok(Sample::tokens(ids, targets))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_are_aligned_reversed_and_held_out_sets_are_disjoint() {
        let train = Addition::new(4, 5000, 3, false);
        let eval = Addition::new(4, 500, 3, true);
        let sample = train.sample(7).unwrap();
        let ids = sample.arrays()[0].as_u32().unwrap();
        let targets = sample.arrays()[1].as_u32().unwrap();
        let (a, b) = train.operands(7);
        assert_eq!(ids.len(), 14);
        assert_eq!(Addition::render(&ids[..10]), format!("{a:>4}+{b:>4}="));
        let sum: String = targets[9..]
            .iter()
            .rev()
            .map(|&d| char::from(b'0' + d as u8))
            .collect();
        assert_eq!(sum.parse::<u64>().unwrap(), a + b);
        assert!(targets[..9].iter().all(|&t| t == IGNORE));
        let seen: std::collections::HashSet<(u64, u64)> =
            (0..train.len()).map(|i| train.operands(i)).collect();
        assert!((0..eval.len()).all(|i| !seen.contains(&eval.operands(i))));
        // Every operand length appears.
        let lengths: std::collections::HashSet<usize> = (0..200)
            .map(|i| train.operands(i).0.to_string().len())
            .collect();
        assert_eq!(lengths.len(), 4);
    }
}
