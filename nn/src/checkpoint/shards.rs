//! Checkpoints of parameters sharded over ranks (ZeRO-3), each rank writing its own part.
//!
//! Every rank saves a rank file ([`save_rank`]): its flat chunk of every tensor and of the
//! optimizer's state under their names, as [`save_with_state`] saves a model. Once every rank
//! has, rank 0 writes the index at the checkpoint's path ([`ShardIndex::save`]): the rank files'
//! names and every entry's whole shape and dtype in its metadata, and no tensor. Loading the
//! index ([`load`](super::load)) reads the rank files, so a checkpoint saved on N ranks gives
//! the whole tensors, or the chunks of any number of ranks.
//!
//! Rank files are named by their step, so the rename of the index is what commits a new
//! checkpoint: the files of the one before stay until then, and are removed after.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use headroom_collectives::Collective;
use safetensors::tensor::Dtype;
use serde::{Deserialize, Serialize};

use super::{
    Header, HostState, OPTIMIZER, OPTIMIZER_STEPS, directory_of, listing, save_with_state, st_dtype,
};
use crate::error::{Error, Result};
use crate::module::Module;
use crate::sharded_params::ParamShards;

/// The index's metadata key: the [`ShardIndex`] as JSON.
pub const SHARDS: &str = "headroom.shards";
/// A rank file's metadata key: which rank of how many saved it, at which step.
pub(super) const SHARD: &str = "headroom.shard";

/// What the index of a sharded checkpoint says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardIndex {
    /// The step the checkpoint was saved at.
    pub step: u64,
    /// Each rank's file in rank order, named relative to the index's directory.
    pub files: Vec<String>,
    /// Every entry by name (optimizer buffers under `optimizer.`), whole.
    pub entries: BTreeMap<String, WholeEntry>,
}

/// An entry of a sharded checkpoint as a whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WholeEntry {
    /// Its whole shape.
    pub shape: Vec<usize>,
    /// Its dtype.
    pub dtype: Dtype,
    /// Whether each rank file holds a chunk of it (else rank 0's holds it whole).
    pub sharded: bool,
    /// Whether each rank file holds a buffer of its own whose length follows the rank's chunk
    /// (8-bit state's block scales), `shape` being their concatenation: it is read back on as
    /// many ranks alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_rank: bool,
}

/// What a rank file says of itself.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(super) struct RankOf {
    pub rank: usize,
    pub ranks: usize,
    pub step: u64,
}

/// The file rank `rank` of `ranks` saves at `step` beside the index at `index`:
/// `checkpoint.step-12.rank-0-of-2.safetensors` for `checkpoint.safetensors`.
pub fn rank_file(index: &Path, step: u64, rank: usize, ranks: usize) -> PathBuf {
    let stem = index.file_stem().unwrap_or_default().to_string_lossy();
    index.with_file_name(format!(
        "{stem}.step-{step}.rank-{rank}-of-{ranks}.safetensors"
    ))
}

/// Saves this rank's chunks of `model` (sharded by `shards`) and of the optimizer's `state`
/// to its rank file for `step`, atomically, and returns the index every rank's files make.
/// Every rank of `shards`' world saves its own; rank 0 then writes the index.
pub fn save_rank(
    index: &Path,
    step: u64,
    (model, shards): (&dyn Module, &ParamShards),
    state: &HostState,
) -> Result<ShardIndex> {
    let (rank, ranks) = (shards.world().rank(), shards.world().world_size());
    let of = RankOf { rank, ranks, step };
    let metadata = BTreeMap::from([(SHARD.to_owned(), json(&of))]);
    save_with_state(
        &rank_file(index, step, rank, ranks),
        model,
        Some(state),
        &metadata,
    )?;
    let mut entries = BTreeMap::new();
    let mut chunks = BTreeMap::new();
    for (name, t) in model.named_parameters() {
        let whole = shards.whole_shape(&name);
        let entry = WholeEntry {
            shape: whole.unwrap_or(t.shape()).dims().to_vec(),
            dtype: st_dtype(t.dtype()),
            sharded: whole.is_some(),
            per_rank: false,
        };
        chunks.insert(name.clone(), t.numel());
        entries.insert(name, entry);
    }
    for (name, array) in &state.buffers {
        let param = name.rsplit_once('.').map(|(param, _)| param);
        let whole =
            param
                .and_then(|param| entries.get(param))
                .ok_or_else(|| Error::Checkpoint {
                    path: index.to_owned(),
                    key: format!("{OPTIMIZER}{name}"),
                    detail: "an optimizer buffer of no parameter saved".into(),
                })?;
        let numel: usize = array.dims.iter().product();
        let entry = match param.and_then(|param| chunks.get(param)) {
            // A buffer of the parameter's chunk's length is that chunk of its whole.
            Some(&chunk) if chunk == numel || !whole.sharded => WholeEntry {
                dtype: st_dtype(array.dtype),
                ..whole.clone()
            },
            _ => WholeEntry {
                shape: vec![numel * ranks],
                dtype: st_dtype(array.dtype),
                sharded: true,
                per_rank: true,
            },
        };
        entries.insert(format!("{OPTIMIZER}{name}"), entry);
    }
    let files = (0..ranks)
        .map(|r| file_name(&rank_file(index, step, r, ranks)))
        .collect();
    Ok(ShardIndex {
        step,
        files,
        entries,
    })
}

impl ShardIndex {
    /// The index that `metadata`, read from the file at `path`, holds; none for a checkpoint
    /// in one file.
    pub fn of(metadata: &BTreeMap<String, String>, path: &Path) -> Result<Option<Self>> {
        let Some(text) = metadata.get(SHARDS) else {
            return Ok(None);
        };
        let index: Self = serde_json::from_str(text).map_err(|err| Error::Checkpoint {
            path: path.to_owned(),
            key: SHARDS.into(),
            detail: err.to_string(),
        })?;
        if index.files.is_empty() {
            return Err(Error::Checkpoint {
                path: path.to_owned(),
                key: SHARDS.into(),
                detail: "names no rank file".into(),
            });
        }
        Ok(Some(index))
    }

    /// Writes the index at `path` atomically, with `metadata` and the optimizer's `steps`,
    /// committing the checkpoint; then removes the rank files of every other step.
    pub fn save(&self, path: &Path, steps: u64, metadata: &BTreeMap<String, String>) -> Result<()> {
        let mut info = metadata.clone();
        info.insert(SHARDS.to_owned(), json(self));
        info.insert(OPTIMIZER_STEPS.to_owned(), steps.to_string());
        super::save_tensors(path, &[], info)?;
        let keep: Vec<PathBuf> = self.files.iter().map(|f| path.with_file_name(f)).collect();
        remove_rank_files(path, &keep)?;
        Ok(())
    }
}

/// Removes the rank files beside the index at `index` that it does not name (all of them
/// where there is no index, or it is not sharded): those of a checkpoint never committed, and
/// temporary copies. An index that cannot be read removes nothing. Returns what it removed,
/// sorted.
pub fn remove_uncommitted(index: &Path) -> Result<Vec<PathBuf>> {
    let keep = match index.exists() {
        false => Vec::new(),
        true => match Header::read(index).and_then(|h| ShardIndex::of(&h.metadata, index)) {
            Ok(Some(sharded)) => sharded
                .files
                .iter()
                .map(|f| index.with_file_name(f))
                .collect(),
            Ok(None) => Vec::new(),
            Err(_) => return Ok(Vec::new()),
        },
    };
    remove_rank_files(index, &keep)
}

/// Removes the rank files beside the index at `index` (and their temporary copies) but
/// those in `keep`. Returns what it removed, sorted.
pub fn remove_rank_files(index: &Path, keep: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let stem = index.file_stem().unwrap_or_default().to_string_lossy();
    let prefix = format!("{stem}.step-");
    let dir = directory_of(index);
    let io = |source| Error::Io {
        path: dir.clone(),
        source,
    };
    let Some(entries) = listing(&dir)? else {
        return Ok(Vec::new());
    };
    let mut removed = Vec::new();
    for entry in entries {
        let path = entry.map_err(io)?.path();
        let name = file_name(&path);
        let ours = name
            .strip_prefix(&prefix)
            .is_some_and(|rest| rest.contains(".rank-") && rest.contains(".safetensors"));
        if ours && !keep.contains(&path) {
            std::fs::remove_file(&path).map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
            removed.push(path);
        }
    }
    removed.sort();
    Ok(removed)
}

/// `path`'s file name as text.
fn file_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

/// `value` as JSON.
fn json(value: &impl Serialize) -> String {
    // Invariant: the index and a rank's description hold maps of strings, numbers and
    // dtypes, which always serialize.
    serde_json::to_string(value).expect("a shard index serializes")
}
