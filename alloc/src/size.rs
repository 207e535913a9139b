//! Byte sizes: rounding to the allocation granule, parsing and printing `64MiB`-style text.

use crate::error::{Error, Result};

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
pub fn round_size(bytes: u64) -> Option<u64> {
    let bytes = bytes.max(1);
    bytes
        .checked_add(GRANULE - 1)
        .map(|padded| padded & !(GRANULE - 1))
}

/// Parses a size such as `4096`, `64MiB`, `1.5GiB`, `512kB` or `2 GB`.
///
/// Binary units (`KiB`, `MiB`, `GiB`, `TiB`) are powers of 1024, decimal units (`kB`, `MB`, `GB`,
/// `TB`) powers of 1000; `K`, `M`, `G`, `T` alone are binary, as in most GPU tooling.
///
/// ```
/// use headroom_alloc::parse_size;
/// assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
/// assert_eq!(parse_size("1.5 GiB").unwrap(), 3 << 29);
/// assert!(parse_size("12 apples").is_err());
/// ```
pub fn parse_size(text: &str) -> Result<u64> {
    let invalid = |reason: &str| Error::InvalidSize {
        text: text.to_owned(),
        reason: reason.to_owned(),
    };
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    if number.is_empty() {
        return Err(invalid("expected a number, such as 64MiB"));
    }
    let multiplier: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => {
            return Err(invalid(
                "unknown unit; use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB",
            ));
        }
    };
    if let Ok(whole) = number.parse::<u64>() {
        return whole
            .checked_mul(multiplier)
            .ok_or_else(|| invalid("does not fit in 64 bits"));
    }
    let value: f64 = number.parse().map_err(|_| invalid("not a number"))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(invalid("does not fit in 64 bits"));
    }
    Ok(bytes.round() as u64)
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
    fn sizes_parse_in_binary_and_decimal_units() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("2 GB").unwrap(), 2_000_000_000);
        assert_eq!(parse_size("0.5MiB").unwrap(), 512 << 10);
        assert_eq!(parse_size("16M").unwrap(), 16 << 20);
        for bad in ["", "MiB", "1.2.3MiB", "5 parsecs", "99999999999TiB"] {
            let err = parse_size(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidSize { .. }), "{bad}: {err}");
        }
    }

    #[test]
    fn bytes_format_for_people() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(3 << 30), "3.00 GiB");
    }
}
