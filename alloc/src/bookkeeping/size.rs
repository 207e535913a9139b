//! Byte sizes: the allocation granule, rounding to it, and printing sizes for people.
//!
//! Parsing sizes from text can fail, so it lives above the error type, in `parse_size` and
//! `byte_size`.

/// Every chunk size and address is a multiple of this many bytes (TensorFlow's 256-byte granule).
pub const GRANULE: u64 = 256;

/// Rounds `bytes` up to a whole number of granules; zero becomes one granule.
///
/// Returns `None` when the rounded size does not fit in a `u64`.
///
/// ```
/// use headroom_alloc::round_size;
/// assert_eq!(round_size(0), Some(256));
/// assert_eq!(round_size(257), Some(512));
/// assert_eq!(round_size(u64::MAX), None);
/// ```
#[inline]
pub fn round_size(bytes: u64) -> Option<u64> {
    let bytes = bytes.max(1);
    bytes
        .checked_add(GRANULE - 1)
        .map(|padded| padded & !(GRANULE - 1))
}

/// Formats a byte count for people: `512 B`, `1.50 KiB`, `64.00 MiB`.
///
/// ```
/// use headroom_alloc::format_bytes;
/// assert_eq!(format_bytes(64 << 20), "64.00 MiB");
/// assert_eq!(format_bytes(100), "100 B");
/// ```
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_to_the_granule_and_never_overflows() {
        assert_eq!(round_size(1), Some(256));
        assert_eq!(round_size(256), Some(256));
        assert_eq!(round_size(1000), Some(1024));
        assert_eq!(round_size(u64::MAX - 255), Some(u64::MAX - 255));
        assert_eq!(round_size(u64::MAX - 254), None);
        assert_eq!(round_size(u64::MAX - 300), Some(u64::MAX - 255));
    }

    #[test]
    fn bytes_format_for_people() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(3 << 30), "3.00 GiB");
    }
}
