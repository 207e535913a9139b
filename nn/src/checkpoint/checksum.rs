//! The checksums a checkpoint carries in its metadata ([`TENSOR_CHECKSUMS`] and
//! [`METADATA_CHECKSUM`], laid out as the [checkpoint module](super) describes), and their
//! verification.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::error::{Error, Result};

/// Metadata key of the tensors' checksums: a JSON object, tensor name to CRC-32 (8 hex digits).
pub const TENSOR_CHECKSUMS: &str = "headroom.crc32.tensors";
/// Metadata key of the CRC-32 (8 hex digits) of every other metadata entry.
pub const METADATA_CHECKSUM: &str = "headroom.crc32.metadata";

fn hex(crc: u32) -> String {
    format!("{crc:08x}")
}

/// Parses exactly 8 hex digits.
fn parse_hex(text: &str) -> Option<u32> {
    let digits = text.len() == 8 && text.bytes().all(|b| b.is_ascii_hexdigit());
    digits.then(|| u32::from_str_radix(text, 16).ok()).flatten()
}

/// The CRC-32 of every metadata entry but [`METADATA_CHECKSUM`].
fn metadata_crc(metadata: &BTreeMap<String, String>) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for (key, value) in metadata.iter().filter(|(k, _)| *k != METADATA_CHECKSUM) {
        for part in [key, value] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
    }
    hasher.finalize()
}

/// Adds both checksum keys to `metadata`, for `tensors` (name, data bytes). The caller has
/// checked that `metadata` holds neither key yet.
pub(super) fn seal<'a>(
    metadata: &mut BTreeMap<String, String>,
    tensors: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) {
    let crcs: BTreeMap<&str, String> = tensors
        .into_iter()
        .map(|(name, bytes)| (name, hex(crc32fast::hash(bytes))))
        .collect();
    // Invariant: a map of strings to strings always serializes.
    let json = serde_json::to_string(&crcs).expect("a map of strings serializes");
    metadata.insert(TENSOR_CHECKSUMS.to_owned(), json);
    let crc = metadata_crc(metadata);
    metadata.insert(METADATA_CHECKSUM.to_owned(), hex(crc));
}

/// Checks `metadata` and every tensor of `tensors` (name, data bytes) against the checksums
/// saved in `metadata`, if it carries any: first that the checksum metadata is well formed and
/// names every tensor and no other, then the metadata's checksum, then each tensor's, in name
/// order.
pub(super) fn verify(
    path: &Path,
    metadata: &BTreeMap<String, String>,
    tensors: &HashMap<&str, &[u8]>,
) -> Result<()> {
    let error = |key: &str, detail: String| Error::Checkpoint {
        path: path.to_owned(),
        key: key.to_owned(),
        detail,
    };
    let (saved_tensors, saved_metadata) = match (
        metadata.get(TENSOR_CHECKSUMS),
        metadata.get(METADATA_CHECKSUM),
    ) {
        (None, None) => return Ok(()),
        (Some(tensors), Some(metadata)) => (tensors, metadata),
        (Some(_), None) => {
            return Err(error(
                METADATA_CHECKSUM,
                format!("missing, though the file carries `{TENSOR_CHECKSUMS}`"),
            ));
        }
        (None, Some(_)) => {
            return Err(error(
                TENSOR_CHECKSUMS,
                format!("missing, though the file carries `{METADATA_CHECKSUM}`"),
            ));
        }
    };
    let saved_metadata = parse_hex(saved_metadata).ok_or_else(|| {
        error(
            METADATA_CHECKSUM,
            format!("`{saved_metadata}` is not a CRC-32 of 8 hex digits"),
        )
    })?;
    let saved_tensors: BTreeMap<String, String> =
        serde_json::from_str(saved_tensors).map_err(|err| {
            error(
                TENSOR_CHECKSUMS,
                format!("not a JSON object of tensor names to checksums: {err}"),
            )
        })?;
    let mut saved = HashMap::with_capacity(saved_tensors.len());
    for (name, crc) in &saved_tensors {
        if !tensors.contains_key(name.as_str()) {
            return Err(error(
                TENSOR_CHECKSUMS,
                format!("names `{name}`, which the file does not hold"),
            ));
        }
        let crc = parse_hex(crc).ok_or_else(|| {
            error(
                TENSOR_CHECKSUMS,
                format!("the checksum of `{name}`, `{crc}`, is not a CRC-32 of 8 hex digits"),
            )
        })?;
        saved.insert(name.as_str(), crc);
    }
    let mut names: Vec<&str> = tensors.keys().copied().collect();
    names.sort_unstable();
    if let Some(name) = names.iter().find(|n| !saved.contains_key(*n)) {
        return Err(error(
            name,
            format!("no checksum saved for it, though the file carries `{TENSOR_CHECKSUMS}`"),
        ));
    }
    let computed = metadata_crc(metadata);
    if computed != saved_metadata {
        let keys: Vec<&str> = metadata
            .keys()
            .map(String::as_str)
            .filter(|k| *k != METADATA_CHECKSUM)
            .collect();
        return Err(error(
            METADATA_CHECKSUM,
            format!(
                "the metadata (`{}`) does not match the checksum saved with it (CRC-32 {} \
                 saved, {} read): the file is corrupted",
                keys.join("`, `"),
                hex(saved_metadata),
                hex(computed)
            ),
        ));
    }
    for name in names {
        // Every tensor has a checksum: checked above.
        let saved = saved[name];
        let computed = crc32fast::hash(tensors[name]);
        if computed != saved {
            return Err(error(
                name,
                format!(
                    "its data does not match the checksum saved with it (CRC-32 {} saved, {} \
                     read): the file is corrupted",
                    hex(saved),
                    hex(computed)
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exactly_eight_hex_digits_parse() {
        assert_eq!(parse_hex("0000002a"), Some(42));
        assert_eq!(parse_hex("DEADbeef"), Some(0xdead_beef));
        for bad in ["", "2a", "+000002a", "0000002g", "000000002a", " 000002a"] {
            assert_eq!(parse_hex(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_metadata_checksum_separates_keys_from_values() {
        let crc = |pairs: &[(&str, &str)]| {
            metadata_crc(
                &pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
        };
        assert_ne!(crc(&[("ab", "c")]), crc(&[("a", "bc")]));
        assert_ne!(crc(&[("a", "")]), crc(&[]));
        assert_eq!(
            crc(&[("a", "b")]),
            crc(&[("a", "b"), (METADATA_CHECKSUM, "anything")])
        );
    }

    #[test]
    fn a_sealed_map_verifies_and_a_flipped_bit_does_not() {
        let path = Path::new("test.safetensors");
        let (weight, bias) = (vec![1u8, 2, 3, 4], vec![5u8; 8]);
        let mut metadata = BTreeMap::from([("step".to_owned(), "3".to_owned())]);
        seal(&mut metadata, [("w", &weight[..]), ("b", &bias[..])]);
        let mut tensors = HashMap::from([("w", &weight[..]), ("b", &bias[..])]);
        verify(path, &metadata, &tensors).unwrap();
        let flipped = [1u8, 2, 3, 5];
        tensors.insert("w", &flipped);
        let err = verify(path, &metadata, &tensors).unwrap_err();
        assert!(
            matches!(&err, Error::Checkpoint { key, .. } if key == "w"),
            "{err}"
        );
    }
}
