//! Parsing sizes written as text, such as `64MiB` or `1.5 GiB`.

use crate::bookkeeping::error::{Error, Result};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
