//! A model directory's weight files as Hugging Face publishes them: one `model.safetensors`,
//! or shards listed by `model.safetensors.index.json`, each mapped into memory rather than
//! read (a model of 16 GB costs no 16 GB copy on the host); and the Hugging Face cache's
//! layout, where a model is `models--{org}--{name}/snapshots/{revision}/`, a directory of
//! symbolic links into `blobs/`.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::tensor::{SafeTensors, TensorView};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::hf::hub_cache::cached_model;
use crate::json_fields::read_json;

/// The file name of a sharded model's index.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// The directory that holds a model's files: `dir` itself when it has a `config.json`; in a
/// Hugging Face cache entry (`models--{org}--{name}`, with `snapshots/` and `refs/`), the
/// snapshot `refs/main` names, or the only snapshot.
///
/// A Hub id (`org/name`) that names no directory is looked up in the local Hugging Face cache
/// ([`cached_model`]).
pub fn model_dir(dir: &Path) -> Result<PathBuf> {
    if let Some(entry) = cached_model(dir) {
        return model_dir(&entry);
    }
    if dir.join(crate::json_fields::CONFIG_FILE).exists() || !dir.join("snapshots").is_dir() {
        return Ok(dir.to_owned());
    }
    let snapshots = dir.join("snapshots");
    if let Ok(revision) = std::fs::read_to_string(dir.join("refs").join("main")) {
        return Ok(snapshots.join(revision.trim()));
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(&snapshots)
        .map_err(|source| Error::Io {
            path: snapshots.clone(),
            source,
        })?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    match entries.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(Error::Checkpoint {
            path: snapshots,
            key: "(directory)".into(),
            detail: format!(
                "{} snapshots and no refs/main to choose one: name the snapshot directory",
                entries.len()
            ),
        }),
    }
}

/// The weight files of one model directory, mapped into memory.
pub(crate) struct WeightFiles {
    /// Each file's path and bytes.
    files: Vec<(PathBuf, Mmap)>,
}

impl WeightFiles {
    /// Maps `dir/model.safetensors`, or every shard `dir/model.safetensors.index.json` lists.
    pub fn open(dir: &Path) -> Result<Self> {
        let files = weight_paths(dir)?
            .into_iter()
            .map(|path| {
                let map = map_file(&path)?;
                Ok((path, map))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { files })
    }

    /// Each file parsed, with its path.
    pub fn parse(&self) -> Result<Vec<(&Path, SafeTensors<'_>)>> {
        self.files
            .iter()
            .map(|(path, map)| {
                let file =
                    SafeTensors::deserialize(map).map_err(|err| Error::CorruptCheckpoint {
                        path: path.clone(),
                        detail: err.to_string(),
                    })?;
                Ok((path.as_path(), file))
            })
            .collect()
    }
}

/// The weight files of the model directory `dir`: `model.safetensors`, or every shard
/// `model.safetensors.index.json` lists.
pub(crate) fn weight_paths(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join(INDEX_FILE);
    let names = match index.exists() {
        true => shard_names(&index)?,
        false => vec![super::WEIGHTS_FILE.to_owned()],
    };
    Ok(names.into_iter().map(|name| dir.join(name)).collect())
}

/// Every tensor of the parsed files by name, with the file that holds it; a name held twice
/// is an error naming both files.
pub(crate) fn by_name<'a>(
    files: &'a [(&'a Path, SafeTensors<'a>)],
) -> Result<HashMap<String, (&'a Path, TensorView<'a>)>> {
    let mut tensors = HashMap::new();
    for (path, file) in files {
        for (name, view) in file.tensors() {
            if let Some((first, _)) = tensors.insert(name.clone(), (*path, view)) {
                return Err(Error::Checkpoint {
                    path: path.to_path_buf(),
                    key: name,
                    detail: format!("also in {}", first.display()),
                });
            }
        }
    }
    Ok(tensors)
}

/// The distinct shard files of an index's `weight_map`, in order of first appearance.
fn shard_names(index: &Path) -> Result<Vec<String>> {
    let value = read_json(index)?;
    let map = value
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| Error::Checkpoint {
            path: index.to_owned(),
            key: "weight_map".into(),
            detail: "missing, or not an object of tensor names to files".into(),
        })?;
    let mut names: Vec<String> = Vec::new();
    for (tensor, file) in map {
        let file = file
            .as_str()
            .filter(|f| !f.contains('/') && !f.contains('\\') && *f != "..")
            .ok_or_else(|| Error::Checkpoint {
                path: index.to_owned(),
                key: tensor.clone(),
                detail: format!("{file} is not a file name in the directory"),
            })?;
        if !names.iter().any(|n| n == file) {
            names.push(file.to_owned());
        }
    }
    Ok(names)
}

/// `path` mapped read-only.
fn map_file(path: &Path) -> Result<Mmap> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    // SAFETY: the map is read-only and lives no longer than the loading that reads it; a file
    // truncated or rewritten by another process meanwhile is outside what the loader promises
    // (as for every reader of memory-mapped safetensors files).
    unsafe { Mmap::map(&file) }.map_err(io)
}
