//! A size as a person wrote it (`24MiB`, `25165824`): parsed once, into bytes, and kept as
//! written, so that a setting reads back and prints exactly as it was given.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::bookkeeping::error::Error;
use crate::bookkeeping::parse_size::parse_size;

/// A number of bytes and the text it was written as.
///
/// Parsed from text by [`parse_size`]'s rules (`FromStr`, so clap can read a flag into it);
/// deserialised from text with a unit or a whole number of bytes; serialised and displayed as
/// written.
///
/// ```
/// use headroom_alloc::ByteSize;
/// let limit: ByteSize = "24MiB".parse().unwrap();
/// assert_eq!((limit.bytes(), limit.to_string()), (24 << 20, "24MiB".to_owned()));
/// assert_eq!(ByteSize::from(4096).as_str(), "4096");
/// assert!("lots".parse::<ByteSize>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ByteSize {
    /// The bytes `text` stands for.
    bytes: u64,
    /// The size as written; it parses to `bytes`.
    text: String,
}

impl ByteSize {
    /// `count` KiB, written so.
    pub fn kib(count: u32) -> Self {
        Self::counted(count, 10, "KiB")
    }

    /// `count` MiB, written so.
    pub fn mib(count: u32) -> Self {
        Self::counted(count, 20, "MiB")
    }

    /// `count` GiB, written so.
    pub fn gib(count: u32) -> Self {
        Self::counted(count, 30, "GiB")
    }

    /// A `u32` shifted by at most 30 bits fits in a `u64`.
    fn counted(count: u32, shift: u32, unit: &str) -> Self {
        Self {
            bytes: u64::from(count) << shift,
            text: format!("{count}{unit}"),
        }
    }

    /// The number of bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The size as it was written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl From<u64> for ByteSize {
    /// A whole number of bytes, written as one.
    fn from(bytes: u64) -> Self {
        Self {
            bytes,
            text: bytes.to_string(),
        }
    }
}

impl FromStr for ByteSize {
    type Err = Error;

    /// Parses `text` as [`parse_size`] does, keeping it as written.
    fn from_str(text: &str) -> Result<Self, Error> {
        Ok(Self {
            bytes: parse_size(text)?,
            text: text.to_owned(),
        })
    }
}

impl fmt::Display for ByteSize {
    /// The size as written.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for ByteSize {
    /// The text as written (a whole number of bytes as its digits).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    /// Text with a unit (`"24MiB"`) or a whole number of bytes (`25165824`).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ByteSizeVisitor)
    }
}

/// Reads a [`ByteSize`] from text or a non-negative integer.
struct ByteSizeVisitor;

impl Visitor<'_> for ByteSizeVisitor {
    type Value = ByteSize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a size such as \"24MiB\", or a whole number of bytes")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<ByteSize, E> {
        text.parse().map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, bytes: u64) -> Result<ByteSize, E> {
        Ok(ByteSize::from(bytes))
    }

    fn visit_i64<E: de::Error>(self, number: i64) -> Result<ByteSize, E> {
        u64::try_from(number)
            .map(ByteSize::from)
            .map_err(|_| E::invalid_value(de::Unexpected::Signed(number), &self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Setting {
        size: ByteSize,
    }

    fn read(json: &str) -> serde_json::Result<ByteSize> {
        serde_json::from_str::<Setting>(json).map(|setting| setting.size)
    }

    #[test]
    fn a_size_parses_once_and_is_written_back_as_given() {
        let size: ByteSize = "24MiB".parse().unwrap();
        assert_eq!(size.bytes(), 24 << 20);
        assert_eq!(size.to_string(), "24MiB");
        let spaced: ByteSize = "1.5 GiB".parse().unwrap();
        assert_eq!((spaced.bytes(), spaced.as_str()), (3 << 29, "1.5 GiB"));
        let json = serde_json::to_string(&Setting { size }).unwrap();
        assert_eq!(json, r#"{"size":"24MiB"}"#, "not 25165824");
        assert_eq!(read(&json).unwrap(), "24MiB".parse().unwrap());
        assert_eq!(ByteSize::mib(24).bytes(), 24 << 20);
        assert_eq!(ByteSize::gib(8).as_str(), "8GiB");
        assert_eq!(ByteSize::kib(u32::MAX).bytes(), u64::from(u32::MAX) << 10);
    }

    #[test]
    fn a_whole_number_of_bytes_reads_as_its_digits() {
        let size = read(r#"{"size":25165824}"#).unwrap();
        assert_eq!((size.bytes(), size.as_str()), (24 << 20, "25165824"));
        let json = serde_json::to_string(&Setting { size }).unwrap();
        assert_eq!(json, r#"{"size":"25165824"}"#);
        assert_eq!(read(r#"{"size":0}"#).unwrap().bytes(), 0);
    }

    #[test]
    fn bad_sizes_are_refused_with_the_text_given() {
        for bad in ["", "lots", "5 parsecs", "99999999999TiB"] {
            let err = bad.parse::<ByteSize>().unwrap_err();
            assert!(matches!(err, Error::InvalidSize { .. }), "{bad}: {err}");
        }
        let err = read(r#"{"size":"12 apples"}"#).unwrap_err().to_string();
        assert!(err.contains("12 apples"), "{err}");
        let err = read(r#"{"size":-1}"#).unwrap_err().to_string();
        assert!(
            err.contains("-1") && err.contains("whole number of bytes"),
            "{err}"
        );
        assert!(read(r#"{"size":1.5}"#).is_err());
    }
}
