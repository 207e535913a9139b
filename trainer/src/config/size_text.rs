//! Sizes in a configuration file as people write them: text with a unit (`"24MiB"`) or a whole
//! number of bytes (`25165824`), both kept as text for the allocator's one size parser.

use serde::{Deserialize, Deserializer};

/// A size written as text or as an integer of bytes.
#[derive(Deserialize)]
#[serde(untagged)]
enum Written {
    Text(String),
    Bytes(u64),
}

impl From<Written> for String {
    fn from(written: Written) -> Self {
        match written {
            Written::Text(text) => text,
            Written::Bytes(bytes) => bytes.to_string(),
        }
    }
}

/// Reads a size setting.
pub fn size<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Written::deserialize(deserializer).map(String::from)
}

/// Reads an optional size setting.
pub fn optional_size<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    Option::<Written>::deserialize(deserializer).map(|written| written.map(String::from))
}
