//! How an allocator reserves memory: what its growth policy comes to over its source.

use serde::{Deserialize, Serialize};

use crate::bookkeeping::segment::{LARGE_REQUEST, LARGE_SEGMENT, SMALL_REQUEST, SMALL_SEGMENT};
use crate::bookkeeping::size::format_bytes;

/// How an allocator reserves memory: what its [`Growth`](crate::Growth) policy comes to over its
/// source. Stats and OOM reports carry it, so that they say why what is reserved is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reservation {
    /// The whole limit, reserved up front ([`Growth::Preallocate`](crate::Growth::Preallocate)).
    Preallocated,
    /// One region grown in place by `step` bytes at a time, just enough for each request, its
    /// free tail given back on `release_cached`.
    InPlace {
        /// The source's step.
        step: u64,
    },
    /// A region per growth, sized by PyTorch's segment rule ([`segment_size`](crate::segment_size):
    /// [`Growth::OnDemand`](crate::Growth::OnDemand) over a source that cannot resize).
    Segments,
    /// A region per growth, the request rounded up to `step`
    /// ([`Growth::Expandable`](crate::Growth::Expandable) over a source that cannot resize).
    Steps {
        /// The step requests are rounded up to.
        step: u64,
    },
}

impl std::fmt::Display for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Self::Preallocated => write!(f, "the limit, reserved up front"),
            Self::InPlace { step } => write!(
                f,
                "one region grown in place in steps of {}",
                format_bytes(step)
            ),
            Self::Segments => write!(
                f,
                "a region per growth: {} for requests up to {}, {} below {}, else the request \
                 rounded up to {}",
                format_bytes(SMALL_SEGMENT),
                format_bytes(SMALL_REQUEST),
                format_bytes(LARGE_SEGMENT),
                format_bytes(LARGE_REQUEST),
                format_bytes(SMALL_SEGMENT)
            ),
            Self::Steps { step } => write!(
                f,
                "a region per growth, the request rounded up to {}",
                format_bytes(step)
            ),
        }
    }
}
