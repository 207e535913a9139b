//! Token ids as the embedding benches draw them: uniform, Zipf-distributed as words in text are,
//! one id everywhere, or one id taking most positions.

use headroom_alloc::trace::SplitMix64;

/// The rows of the small table the skewed spread is benched on (a character or digit
/// vocabulary).
pub const SMALL_TABLE: usize = 16;

/// The embedding benches' cases, `(spread, vocabulary)`: uniform, Zipf and one id over a
/// `large` vocabulary (GPT-2's 50257 at full size), and the skewed spread over
/// [`SMALL_TABLE`] rows. `benches/peers/torch_embedding.py` lists the same.
pub fn embedding_cases(large: usize) -> [(IdSpread, usize); 4] {
    [
        (IdSpread::Uniform, large),
        (IdSpread::Zipf, large),
        (IdSpread::OneId, large),
        (IdSpread::Skewed, SMALL_TABLE),
    ]
}

/// How a bench's ids are spread over the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdSpread {
    /// Uniform over the vocabulary.
    Uniform,
    /// Rank `r` with probability proportional to `1 / r` (Zipf's law, as words in text): over
    /// GPT-2's 50257 ids the most frequent takes about 9% of positions.
    Zipf,
    /// Id 0 everywhere (a padding token filling a batch).
    OneId,
    /// Id 0 at 90% of positions, the rest uniform (a tiny vocabulary dominated by one symbol).
    Skewed,
}

impl IdSpread {
    /// The name benches print, and their peers match lines on.
    pub fn name(self) -> &'static str {
        match self {
            IdSpread::Uniform => "uniform",
            IdSpread::Zipf => "zipf",
            IdSpread::OneId => "one-id",
            IdSpread::Skewed => "skewed",
        }
    }

    /// `positions` ids below `vocab` (at least 1), drawn from a fixed seed.
    pub fn draw(self, positions: usize, vocab: usize) -> Vec<u32> {
        let mut rng = SplitMix64::new(7);
        let mut below = |n: usize| ((rng.next_f64() * n as f64) as usize).min(n - 1);
        match self {
            IdSpread::Uniform => (0..positions).map(|_| below(vocab) as u32).collect(),
            IdSpread::OneId => vec![0; positions],
            IdSpread::Skewed => (0..positions)
                .map(|_| match below(10) {
                    0 => below(vocab) as u32,
                    _ => 0,
                })
                .collect(),
            IdSpread::Zipf => {
                // By inverse transform over the cumulative weights.
                let mut cumulative: Vec<f64> = (1..=vocab).map(|r| 1.0 / r as f64).collect();
                for r in 1..vocab {
                    cumulative[r] += cumulative[r - 1];
                }
                let total = cumulative[vocab - 1];
                (0..positions)
                    .map(|_| {
                        let u = rng.next_f64() * total;
                        cumulative.partition_point(|&c| c < u).min(vocab - 1) as u32
                    })
                    .collect()
            }
        }
    }
}
