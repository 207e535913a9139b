//! How an allocator grows, how far, and what it keeps.

use serde::{Deserialize, Serialize};

use crate::bookkeeping::error::{Error, Result};
use crate::bookkeeping::size::GRANULE;

/// The granule in which an expandable region grows and shrinks (a CUDA physical page).
pub const EXPANSION_STEP: u64 = 2 << 20;

/// The default cap on bytes wasted by handing out a chunk whole (TensorFlow's default).
pub const DEFAULT_MAX_INTERNAL_FRAGMENTATION: u64 = 128 << 20;

/// When regions are reserved from the memory source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Growth {
    /// One region of the whole limit, reserved when the allocator is made (TensorFlow's default),
    /// or of as much as the source gives, backing off 10% at a time while it refuses, as
    /// TensorFlow does; the rest, if ever needed, is reserved the same way.
    Preallocate,
    /// Memory reserved as needed and no more (TensorFlow's memory growth), the default. Over a
    /// source that [can resize](crate::MemorySource::can_resize) (CUDA's virtual memory
    /// management, [`HostPages`](crate::HostPages), a virtual address space), one region grows
    /// in place in steps of [`EXPANSION_STEP`] just enough to serve each request, as under
    /// [`Expandable`](Self::Expandable). Over any other source, each new region is as large as
    /// PyTorch's segment rule says ([`segment_size`](crate::segment_size): 2 MiB for requests of
    /// up to 1 MiB, 20 MiB below 10 MiB, else the request rounded up to 2 MiB), backing off to
    /// 90% while the source refuses.
    OnDemand,
    /// One region that grows in place, in steps of [`EXPANSION_STEP`], just enough to serve each
    /// request, and gives its free tail back on `release_cached` (PyTorch's expandable
    /// segments). Needs a source that [can resize](crate::MemorySource::can_resize); with one that
    /// cannot, each growth reserves a new region of the request rounded up to the step, where
    /// [`OnDemand`](Self::OnDemand) would reserve a PyTorch segment.
    Expandable,
}

impl std::str::FromStr for Growth {
    type Err = Error;
    fn from_str(text: &str) -> Result<Self> {
        match text {
            "preallocate" => Ok(Self::Preallocate),
            "on-demand" | "ondemand" | "growth" => Ok(Self::OnDemand),
            "expandable" => Ok(Self::Expandable),
            other => Err(Error::InvalidConfig(format!(
                "unknown growth policy {other:?}: use `on-demand`, `preallocate` or `expandable`"
            ))),
        }
    }
}

/// The most bytes the allocator may reserve from its source.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Limit {
    /// An absolute number of bytes (clamped to the source's capacity).
    Bytes(u64),
    /// A fraction in (0, 1] of the source's capacity (TensorFlow's memory fraction).
    Fraction(f64),
}

impl std::fmt::Display for Limit {
    /// A limit as people write it: `24.00 MiB`, or `a fraction 0.5 of the capacity`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bytes(bytes) => f.write_str(&crate::format_bytes(*bytes)),
            Self::Fraction(fraction) => write!(f, "a fraction {fraction} of the capacity"),
        }
    }
}

/// Everything that shapes an allocator's behaviour.
///
/// ```
/// use headroom_alloc::{AllocatorConfig, Growth, Limit};
/// let config = AllocatorConfig::default()
///     .with_limit(Limit::Fraction(0.9))
///     .with_growth(Growth::OnDemand)
///     .with_history(10_000);
/// assert!(config.garbage_collection);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocatorConfig {
    /// The most bytes that may be reserved from the source.
    pub limit: Limit,
    /// When regions are reserved.
    pub growth: Growth,
    /// On failure, release regions that are entirely free and retry before reporting an OOM.
    pub garbage_collection: bool,
    /// A free chunk is split when the remainder is at least this large, even if it is less than
    /// the request (otherwise it is split only when it is at least twice the request). An exact
    /// fit leaves no remainder and is never split, so 0 acts as one granule does.
    pub max_internal_fragmentation: u64,
    /// Events kept by the history recorder; 0 turns recording off.
    pub history_capacity: usize,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        Self {
            limit: Limit::Fraction(1.0),
            growth: Growth::OnDemand,
            garbage_collection: true,
            max_internal_fragmentation: DEFAULT_MAX_INTERNAL_FRAGMENTATION,
            history_capacity: 0,
        }
    }
}

impl AllocatorConfig {
    /// PyTorch's `expandable_segments:True`: one region that grows in place
    /// ([`Growth::Expandable`]), and chunks split whenever anything would be left over
    /// (`max_internal_fragmentation` of one granule), so that reserved memory tracks what is in
    /// use as closely as 2 MiB steps allow. Costs more time than the default on workloads of many
    /// small, short-lived sizes, where free chunks multiply.
    pub fn expandable_segments() -> Self {
        Self::default()
            .with_growth(Growth::Expandable)
            .with_max_internal_fragmentation(GRANULE)
    }

    /// Sets the limit.
    pub fn with_limit(mut self, limit: Limit) -> Self {
        self.limit = limit;
        self
    }

    /// Sets the limit in bytes.
    pub fn with_limit_bytes(self, bytes: u64) -> Self {
        self.with_limit(Limit::Bytes(bytes))
    }

    /// Sets the growth policy.
    pub fn with_growth(mut self, growth: Growth) -> Self {
        self.growth = growth;
        self
    }

    /// Turns garbage collection on failure on or off.
    pub fn with_garbage_collection(mut self, on: bool) -> Self {
        self.garbage_collection = on;
        self
    }

    /// Sets the internal-fragmentation cap of the split rule.
    pub fn with_max_internal_fragmentation(mut self, bytes: u64) -> Self {
        self.max_internal_fragmentation = bytes;
        self
    }

    /// Keeps the last `events` allocation events in a ring buffer.
    pub fn with_history(mut self, events: usize) -> Self {
        self.history_capacity = events;
        self
    }

    /// The limit in bytes for a source of this capacity: clamped to it, rounded down to 256 B.
    pub fn resolve_limit(&self, capacity: u64) -> Result<u64> {
        let bytes = match self.limit {
            Limit::Bytes(bytes) => bytes.min(capacity),
            Limit::Fraction(fraction) => {
                if !(fraction > 0.0 && fraction <= 1.0) {
                    return Err(Error::InvalidConfig(format!(
                        "memory fraction {fraction} is outside (0, 1]"
                    )));
                }
                (capacity as f64 * fraction) as u64
            }
        };
        let bytes = bytes & !(GRANULE - 1);
        if bytes == 0 {
            return Err(Error::InvalidConfig(format!(
                "the limit ({} of a source holding {}) is below one 256-byte granule",
                self.limit,
                crate::format_bytes(capacity)
            )));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_resolve_against_capacity() {
        let config = AllocatorConfig::default();
        assert_eq!(config.resolve_limit(1 << 30).unwrap(), 1 << 30);
        let half = config.clone().with_limit(Limit::Fraction(0.5));
        assert_eq!(half.resolve_limit(1 << 30).unwrap(), 1 << 29);
        let bytes = config.clone().with_limit_bytes(1000);
        assert_eq!(bytes.resolve_limit(1 << 30).unwrap(), 768);
        assert_eq!(bytes.resolve_limit(512).unwrap(), 512);
        for bad in [0.0, -1.0, 1.5, f64::NAN] {
            let err = config
                .clone()
                .with_limit(Limit::Fraction(bad))
                .resolve_limit(1 << 30);
            assert!(matches!(err, Err(Error::InvalidConfig(_))), "{bad}");
        }
        let tiny = config.with_limit_bytes(100).resolve_limit(1 << 30);
        assert!(matches!(tiny, Err(Error::InvalidConfig(_))));
    }

    #[test]
    fn growth_parses_from_its_cli_names() {
        assert_eq!("on-demand".parse::<Growth>().unwrap(), Growth::OnDemand);
        assert_eq!(
            "preallocate".parse::<Growth>().unwrap(),
            Growth::Preallocate
        );
        assert_eq!("expandable".parse::<Growth>().unwrap(), Growth::Expandable);
        assert!("sometimes".parse::<Growth>().is_err());
    }
}
