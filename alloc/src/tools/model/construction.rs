//! What the model expects of constructing an allocator from a configuration.

use crate::bookkeeping::size::GRANULE;
use crate::policy::config::{AllocatorConfig, Growth, Limit};

/// The expected outcome of `Allocator::new`, worked out from the documented rules alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Construction {
    /// It succeeds, with this limit in bytes.
    Builds {
        /// The resolved limit.
        limit: u64,
    },
    /// It fails with `Error::InvalidConfig`: a fraction outside (0, 1], or a limit that comes
    /// to less than one granule.
    InvalidConfig,
    /// It fails with `Error::Source`: the preallocation was refused and backing off 10% leaves
    /// less than one granule.
    SourceRefuses,
}

impl Construction {
    /// What constructing an allocator with `config` over a virtual source of `capacity` bytes
    /// must do, when that source refuses its reserve number `fail_reserve` (0: none).
    pub fn expect(capacity: u64, config: &AllocatorConfig, fail_reserve: u8) -> Self {
        let bytes = match config.limit {
            // A byte limit is clamped to the capacity.
            Limit::Bytes(bytes) => bytes.min(capacity),
            Limit::Fraction(fraction) if fraction > 0.0 && fraction <= 1.0 => {
                (capacity as f64 * fraction).floor() as u64
            }
            // Zero, negative, above one, NaN.
            Limit::Fraction(_) => return Self::InvalidConfig,
        };
        let limit = bytes / GRANULE * GRANULE;
        if limit == 0 {
            return Self::InvalidConfig;
        }
        // Preallocation is the first reserve; refused, it backs off to 90% in whole granules.
        let backed_off = limit / 10 * 9 / GRANULE * GRANULE;
        if config.growth == Growth::Preallocate && fail_reserve == 1 && backed_off < GRANULE {
            return Self::SourceRefuses;
        }
        Self::Builds { limit }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect(capacity: u64, limit: Limit) -> Construction {
        let config = AllocatorConfig::default().with_limit(limit);
        Construction::expect(capacity, &config, 0)
    }

    #[test]
    fn the_model_agrees_with_the_documented_limits() {
        let mib = 1 << 20;
        assert_eq!(
            expect(mib, Limit::Bytes(GRANULE)),
            Construction::Builds { limit: GRANULE }
        );
        assert_eq!(
            expect(mib, Limit::Bytes(u64::MAX)),
            Construction::Builds { limit: mib }
        );
        assert_eq!(
            expect(mib, Limit::Bytes(GRANULE - 1)),
            Construction::InvalidConfig
        );
        assert_eq!(
            expect(GRANULE - 1, Limit::Fraction(1.0)),
            Construction::InvalidConfig
        );
        for bad in [0.0, -0.5, 1.0 + f64::EPSILON, f64::NAN, f64::MIN_POSITIVE] {
            assert_eq!(
                expect(mib, Limit::Fraction(bad)),
                Construction::InvalidConfig
            );
        }
        let prealloc = AllocatorConfig::default()
            .with_limit_bytes(GRANULE)
            .with_growth(Growth::Preallocate);
        assert_eq!(
            Construction::expect(mib, &prealloc, 1),
            Construction::SourceRefuses
        );
        assert_eq!(
            Construction::expect(mib, &prealloc, 2),
            Construction::Builds { limit: GRANULE }
        );
    }
}
