//! The size of a new region for a source that cannot grow one in place.
//!
//! The rule is PyTorch's caching allocator's segment rule. A request of at most
//! [`SMALL_REQUEST`] (1 MiB) gets a region of [`SMALL_SEGMENT`] (2 MiB), which later small
//! requests share. A request below [`LARGE_REQUEST`] (10 MiB) gets a region of
//! [`LARGE_SEGMENT`] (20 MiB). A larger request gets a region of its own size, rounded up to
//! [`SMALL_SEGMENT`]. So a region is never more than 20 MiB or 2 MiB larger than the request
//! that made it, and sizes never double: what is reserved follows what is in use.

/// Requests up to this size share regions of [`SMALL_SEGMENT`].
pub const SMALL_REQUEST: u64 = 1 << 20;

/// The region a small request gets, and the step larger regions are rounded up to.
pub const SMALL_SEGMENT: u64 = 2 << 20;

/// Requests below this size (and above [`SMALL_REQUEST`]) share regions of [`LARGE_SEGMENT`].
pub const LARGE_REQUEST: u64 = 10 << 20;

/// The region a medium request gets.
pub const LARGE_SEGMENT: u64 = 20 << 20;

/// The size of the region to reserve for a request of `rounded` bytes (a multiple of the
/// granule), before the limit caps it.
///
/// ```
/// use headroom_alloc::segment_size;
/// assert_eq!(segment_size(4096), 2 << 20);
/// assert_eq!(segment_size(3 << 20), 20 << 20);
/// assert_eq!(segment_size((64 << 20) + 256), 66 << 20);
/// ```
pub fn segment_size(rounded: u64) -> u64 {
    if rounded <= SMALL_REQUEST {
        SMALL_SEGMENT
    } else if rounded < LARGE_REQUEST {
        LARGE_SEGMENT
    } else {
        rounded
            .div_ceil(SMALL_SEGMENT)
            .saturating_mul(SMALL_SEGMENT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bookkeeping::size::GRANULE;

    #[test]
    fn regions_follow_the_request_and_never_double() {
        for rounded in (GRANULE..=SMALL_REQUEST).step_by(100 * 1024) {
            assert_eq!(segment_size(rounded), SMALL_SEGMENT, "{rounded}");
        }
        assert_eq!(segment_size(SMALL_REQUEST + GRANULE), LARGE_SEGMENT);
        assert_eq!(segment_size(LARGE_REQUEST - GRANULE), LARGE_SEGMENT);
        assert_eq!(segment_size(LARGE_REQUEST), LARGE_REQUEST);
        let mut rounded = LARGE_REQUEST;
        while rounded < 1 << 40 {
            let size = segment_size(rounded);
            assert!(
                size >= rounded && size - rounded < SMALL_SEGMENT,
                "{rounded}"
            );
            assert!(size.is_multiple_of(SMALL_SEGMENT));
            rounded = rounded * 3 / 2 / GRANULE * GRANULE + GRANULE;
        }
        // The largest request saturates instead of wrapping; the limit caps it anyway.
        assert_eq!(segment_size(!(GRANULE - 1)), u64::MAX);
    }
}
