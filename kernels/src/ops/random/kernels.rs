//! What a backend runs for dropout, and the counter-based generator every backend draws its mask
//! from.

use crate::buffer::Buffer;
use crate::error::Result;

/// The kernels of this family that a backend runs.
pub trait RandomKernels {
    /// `out[i] = x[i] / (1 - p)` where [`keeps`]`(seed, i, p)`, else 0; float dtypes.
    fn dropout(&self, x: &Buffer, out: &mut Buffer, p: f64, seed: u64) -> Result<()>;
}

/// 64 random bits for element `index` under `seed` (SplitMix64's finalizer over the pair):
/// statistically independent across indices and seeds, reproducible everywhere.
#[inline]
pub fn random_bits(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform draw in [0, 1) for element `index` under `seed`, from its 64 random bits.
#[inline]
pub fn uniform(seed: u64, index: u64) -> f64 {
    (random_bits(seed, index) >> 11) as f64 / (1u64 << 53) as f64
}

/// Whether dropout with probability `p` keeps element `index` under `seed`.
#[inline]
pub fn keeps(seed: u64, index: u64, p: f64) -> bool {
    uniform(seed, index) >= p
}
