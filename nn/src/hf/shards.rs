//! How transformers lays a model's weights out in files: one `model.safetensors`, or shards
//! `model-00001-of-0000N.safetensors` listed by `model.safetensors.index.json`.

use std::ops::Range;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::error::{Error, Result};
use crate::hf::weight_files::INDEX_FILE;

/// transformers' default `max_shard_size`, "5GB".
pub const DEFAULT_SHARD_BYTES: u64 = 5_000_000_000;

/// The shards of tensors of `sizes` bytes, in order, each at most `limit` bytes: a new shard
/// starts when the next tensor would pass the limit, and a tensor larger than the limit gets a
/// shard of its own. Each shard is a range of the tensors.
pub(crate) fn split(sizes: &[u64], limit: u64) -> Vec<Range<usize>> {
    let mut shards = Vec::new();
    let (mut start, mut size) = (0, 0u64);
    for (i, &bytes) in sizes.iter().enumerate() {
        if i > start && (bytes > limit || size.saturating_add(bytes) > limit) {
            shards.push(start..i);
            (start, size) = (i, 0);
        }
        size = size.saturating_add(bytes);
        if bytes > limit {
            shards.push(start..i + 1);
            (start, size) = (i + 1, 0);
        }
    }
    if start < sizes.len() {
        shards.push(start..sizes.len());
    }
    shards
}

/// The file name of shard `index` (from 0) of `count`, as transformers names it.
pub(crate) fn shard_name(index: usize, count: usize) -> String {
    format!("model-{:05}-of-{count:05}.safetensors", index + 1)
}

/// True for the names of weight files of either layout: `model.safetensors`, the index, and
/// the shards.
pub(crate) fn is_weight_file(name: &str) -> bool {
    if name == super::WEIGHTS_FILE || name == INDEX_FILE {
        return true;
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix("model-")
        .and_then(|rest| rest.strip_suffix(".safetensors"))
        .and_then(|rest| rest.split_once("-of-"))
        .is_some_and(|(index, count)| digits(index) && digits(count))
}

/// The weight files of either layout in `dir`, sorted by name; none when `dir` does not
/// exist.
pub(crate) fn weight_files_in(dir: &Path) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Io {
                path: dir.to_owned(),
                source,
            });
        }
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| Error::Io {
            path: dir.to_owned(),
            source,
        })?;
        if let Some(name) = entry.file_name().to_str()
            && is_weight_file(name)
        {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// The index of a sharded checkpoint of `total_size` bytes: each tensor's name and its file.
pub(crate) fn index_json<'a>(
    total_size: u64,
    weight_map: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Value {
    let mut map: Vec<(&str, &str)> = weight_map.into_iter().collect();
    map.sort();
    let map: Map<String, Value> = map
        .into_iter()
        .map(|(name, file)| (name.to_owned(), json!(file)))
        .collect();
    json!({"metadata": {"total_size": total_size}, "weight_map": map})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_fill_in_order_and_a_large_tensor_stands_alone() {
        assert_eq!(
            split(&[4, 4, 4], 12),
            std::iter::once(0..3).collect::<Vec<_>>()
        );
        assert_eq!(split(&[4, 4, 4], 8), [0..2, 2..3]);
        assert_eq!(split(&[4, 20, 4, 4], 8), [0..1, 1..2, 2..4]);
        assert_eq!(split(&[20, 4], 8), [0..1, 1..2]);
        assert_eq!(split(&[4, 20], 8), [0..1, 1..2]);
        assert_eq!(split(&[], 8), Vec::<Range<usize>>::new());
    }

    #[test]
    fn weight_files_of_both_layouts_are_recognized() {
        assert_eq!(shard_name(0, 3), "model-00001-of-00003.safetensors");
        for name in [
            "model.safetensors",
            "model.safetensors.index.json",
            "model-00002-of-00003.safetensors",
        ] {
            assert!(is_weight_file(name), "{name}");
        }
        for name in [
            "config.json",
            "model-00001-of-00002.safetensors.tmp-12",
            "model-a-of-00002.safetensors",
            "model--of-2.safetensors",
            "tokenizer.json",
        ] {
            assert!(!is_weight_file(name), "{name}");
        }
    }
}
