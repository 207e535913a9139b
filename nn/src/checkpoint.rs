//! Checkpoints in the safetensors format: parameters under their state-dict names, optimizer
//! state under `optimizer.{parameter}.{buffer}`, and string metadata. A PyTorch user opens one
//! with `safetensors.torch.load_file`.
//!
//! Saving writes a temporary file beside the target, syncs it, renames it over the target and
//! syncs the directory, so a crash leaves the old checkpoint or the new one, never half of one.
//! A process killed mid-write leaves its temporary file (`{file name}.tmp-{pid}`) behind;
//! [`remove_stale_temporaries`] deletes those.
//!
//! A model sharded over ranks is saved by every rank at once, each its own file, beside an
//! index that names them ([`save_rank`], [`ShardIndex`]): loading the index reads them all, and
//! gives the whole tensors or any rank's chunks of any number of ranks.
//!
//! # Checksums
//!
//! Saving adds two metadata keys beside the caller's, which keep their names and values:
//! - [`TENSOR_CHECKSUMS`] (`headroom.crc32.tensors`): a JSON object mapping every tensor's name
//!   to the CRC-32 of its data bytes, as 8 lowercase hex digits, such as
//!   `{"0.bias":"5d2a9e1c","0.weight":"0b3f47a2"}`.
//! - [`METADATA_CHECKSUM`] (`headroom.crc32.metadata`): the CRC-32 of every other metadata entry
//!   (the tensor checksums included), in key order, each written as the key's length in bytes
//!   (u64, little-endian), the key, the value's length and the value.
//!
//! [`load`] checks both before it returns, so a flipped byte in any tensor's data or in the
//! metadata (a trainer's JSON state, say) is an [`Error::Checkpoint`] naming the tensor or
//! [`METADATA_CHECKSUM`], before anything is restored. The safetensors parser rejects most
//! damage to the header itself. Malformed checksum metadata (one key without the other, not
//! parseable, naming a tensor the file does not hold, or leaving a tensor out) is an error naming
//! the key. Files without either key (written before checksums, or by other tools such as
//! PyTorch's `safetensors`) load unverified. [`Checkpoint::metadata`] leaves both keys out, and
//! they are reserved: saving metadata that holds either is an error.
//!
//! CRC-32 (through `crc32fast`, with the processor's carry-less multiply) ran at about 19 GB/s
//! on one core of the project's x86 development machine: a 100 MB checkpoint loaded in 50 ms
//! verified against 44 ms without checksums (from the page cache), and its save, 140 to 390 ms,
//! is mostly the sync.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use headroom_alloc::Tag;
use headroom_autograd::Tensor;
use headroom_collectives::Collective;
use headroom_kernels::{Array, DType, Device, Shape};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use crate::error::{Error, Result};
use crate::module::Module;
use crate::optim::Optimizer;
use crate::sharded_params::ParamShards;

mod checksum;
mod header;
mod rank_file;
mod shards;

use rank_file::RankFile;

pub use checksum::{METADATA_CHECKSUM, TENSOR_CHECKSUMS};
pub use header::Header;
pub use shards::{
    SHARDS, ShardIndex, WholeEntry, rank_file, remove_rank_files, remove_uncommitted, save_rank,
};

/// Prefix of optimizer state entries.
const OPTIMIZER: &str = "optimizer.";
/// Metadata key of the optimizer's step count.
const OPTIMIZER_STEPS: &str = "optimizer.steps";

fn st_dtype(dtype: DType) -> Dtype {
    match dtype {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::U32 => Dtype::U32,
        DType::I32 => Dtype::I32,
        DType::U8 => Dtype::U8,
    }
}

fn our_dtype(dtype: Dtype) -> Option<DType> {
    Some(match dtype {
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::U32 => DType::U32,
        Dtype::I32 => DType::I32,
        Dtype::U8 => DType::U8,
        _ => return None,
    })
}

/// Saves `model`'s parameters, `optimizer`'s state (if given) and `metadata` to `path`,
/// atomically, with the checksums of every tensor and of the metadata (see the
/// [module docs](self)). `metadata` may not hold [`TENSOR_CHECKSUMS`] or [`METADATA_CHECKSUM`].
///
/// ```
/// use headroom_nn::{Activation, Initializer, Module, checkpoint, mlp};
/// use headroom_kernels::{Device, DeviceConfig, DType};
/// let cpu = Device::cpu(DeviceConfig::new(16 << 20))?;
/// let model = mlp(&mut Initializer::new(&cpu, DType::F32, 0), &[4, 8, 3], Activation::Relu)?;
/// let path = std::env::temp_dir().join(format!("headroom-doc-{}.safetensors", std::process::id()));
/// checkpoint::save(&path, &model, None, &Default::default())?;
/// let mut other = mlp(&mut Initializer::new(&cpu, DType::F32, 1), &[4, 8, 3], Activation::Relu)?;
/// checkpoint::load(&path, &cpu)?.restore_model(&mut other)?;
/// assert_eq!(other.parameters()[0].to_f64()?, model.parameters()[0].to_f64()?);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), headroom_nn::Error>(())
/// ```
pub fn save(
    path: &Path,
    model: &dyn Module,
    optimizer: Option<&dyn Optimizer>,
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    let state = optimizer.map(HostState::of).transpose()?;
    save_with_state(path, model, state.as_ref(), metadata)
}

/// An array's dtype, dimensions and bytes, copied to host memory.
#[derive(Debug, Clone, PartialEq)]
pub struct HostArray {
    /// Its element type.
    pub dtype: DType,
    /// Its dimensions.
    pub dims: Vec<usize>,
    /// Its elements, little-endian.
    pub bytes: Vec<u8>,
}

impl HostArray {
    /// A copy of `array`.
    pub fn of(array: &Array) -> Result<Self> {
        Ok(Self {
            dtype: array.dtype(),
            dims: array.shape().dims().to_vec(),
            bytes: array.to_bytes()?,
        })
    }
}

/// An optimizer's state as a checkpoint holds it: its named buffers in host memory and its
/// step count. The ranks of a sharded state gather it into one of these for rank 0 to save.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostState {
    /// Each buffer under the name [`Optimizer::state`] gives it.
    pub buffers: Vec<(String, HostArray)>,
    /// Updates done.
    pub steps: u64,
}

impl HostState {
    /// A copy of `optimizer`'s state.
    pub fn of(optimizer: &dyn Optimizer) -> Result<Self> {
        let (buffers, steps) = optimizer.state();
        let buffers = buffers
            .into_iter()
            .map(|(name, array)| Ok((name, HostArray::of(&array)?)))
            .collect::<Result<_>>()?;
        Ok(Self { buffers, steps })
    }
}

/// [`save`] with the optimizer's state given as it is to be stored.
pub fn save_with_state(
    path: &Path,
    model: &dyn Module,
    state: Option<&HostState>,
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    if let Some(key) = [TENSOR_CHECKSUMS, METADATA_CHECKSUM, SHARDS]
        .into_iter()
        .find(|k| metadata.contains_key(*k))
    {
        return Err(Error::Checkpoint {
            path: path.to_owned(),
            key: key.to_owned(),
            detail: "reserved for the checkpoint's checksums and shards".into(),
        });
    }
    let weights: Vec<(String, HostArray)> = model
        .named_parameters()
        .into_iter()
        .map(|(name, t)| Ok((name, HostArray::of(t.array())?)))
        .collect::<Result<_>>()?;
    let mut host: Vec<(String, &HostArray)> = weights.iter().map(|(n, a)| (n.clone(), a)).collect();
    let mut info = metadata.clone();
    if let Some(state) = state {
        host.extend(
            state
                .buffers
                .iter()
                .map(|(n, a)| (format!("{OPTIMIZER}{n}"), a)),
        );
        info.insert(OPTIMIZER_STEPS.into(), state.steps.to_string());
    }
    save_tensors(path, &host, info)
}

/// Writes `host`'s arrays under their names and `info` to `path`, sealed with their
/// checksums, atomically.
fn save_tensors(
    path: &Path,
    host: &[(String, &HostArray)],
    mut info: BTreeMap<String, String>,
) -> Result<()> {
    checksum::seal(
        &mut info,
        host.iter()
            .map(|(name, array)| (name.as_str(), array.bytes.as_slice())),
    );
    let views = host
        .iter()
        .map(|(name, array)| {
            let view = TensorView::new(st_dtype(array.dtype), array.dims.clone(), &array.bytes)
                .map_err(|err| Error::Checkpoint {
                    path: path.to_owned(),
                    key: name.clone(),
                    detail: err.to_string(),
                })?;
            Ok((name.clone(), view))
        })
        .collect::<Result<Vec<_>>>()?;
    let info: HashMap<String, String> = info.into_iter().collect();
    let buffer = safetensors::tensor::serialize(views, Some(info)).map_err(|err| {
        Error::CorruptCheckpoint {
            path: path.to_owned(),
            detail: err.to_string(),
        }
    })?;
    write_atomically(path, &buffer)
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, renames it to `path` and syncs
/// the directory.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomically_with(path, |temporary| {
        let mut file = File::create(temporary)?;
        file.write_all(bytes)
    })
}

/// As [`write_atomically`], with `write` creating the temporary file it is given (so that a
/// large file can be written piece by piece rather than from one buffer).
pub(crate) fn write_atomically_with(
    path: &Path,
    write: impl FnOnce(&Path) -> std::io::Result<()>,
) -> Result<()> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(format!(".tmp-{}", std::process::id()));
    let temporary = path.with_file_name(name);
    let written = (|| {
        write(&temporary)?;
        File::open(&temporary)?.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if let Err(err) = written {
        std::fs::remove_file(&temporary).ok();
        return Err(io(err));
    }
    let directory = directory_of(path);
    // Makes the rename itself durable; some platforms cannot open a directory, which only
    // weakens durability, not atomicity.
    if let Ok(dir) = File::open(&directory) {
        dir.sync_all().ok();
    }
    Ok(())
}

/// One entry of a checkpoint: where its bytes lie, and what they hold.
#[derive(Debug)]
struct Entry {
    dtype: Dtype,
    shape: Vec<usize>,
    place: Place,
}

/// Where an entry's bytes lie.
#[derive(Debug)]
enum Place {
    /// In this file, at this range.
    Here(std::ops::Range<usize>),
    /// In the rank files, one flat chunk each (zeros past the end in the last).
    Chunks,
    /// Whole in rank 0's file.
    FirstRank,
    /// A buffer of each rank's own in its file ([`WholeEntry::per_rank`]), laid out as
    /// [`Place::Chunks`]: read on as many ranks alone.
    PerRank,
}

/// A checkpoint read and checked: every entry's header parsed, its bytes in range and, when the
/// file carries checksums, its data and the metadata matching them. A sharded checkpoint's
/// index holds its rank files, each read and checked the same way.
#[derive(Debug)]
pub struct Checkpoint {
    path: PathBuf,
    device: Device,
    bytes: Vec<u8>,
    /// Invariant: every entry in [`Place::Chunks`], [`Place::PerRank`] or [`Place::FirstRank`]
    /// has its entry in the headers of the files of `ranks`, of its chunk's length (or whole)
    /// and dtype.
    entries: HashMap<String, Entry>,
    metadata: BTreeMap<String, String>,
    /// A sharded checkpoint's rank files, in rank order, each read when first needed; none
    /// for a checkpoint in one file.
    ranks: Vec<RankFile>,
}

/// A fault of the entry `key` of the checkpoint file at `path`.
fn checkpoint_error(path: &Path, key: &str, detail: impl Into<String>) -> Error {
    Error::Checkpoint {
        path: path.to_owned(),
        key: key.to_owned(),
        detail: detail.into(),
    }
}

/// Reads the checkpoint at `path`, for restoring onto `device`. A file that is not a complete
/// safetensors file (truncated, corrupt, another format) is [`Error::CorruptCheckpoint`]; a
/// tensor or the metadata not matching the checksum saved with it, or malformed checksum
/// metadata, is an [`Error::Checkpoint`] naming the tensor or the key.
pub fn load(path: &Path, device: &Device) -> Result<Checkpoint> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })?;
    let corrupt = |err: safetensors::SafeTensorError| Error::CorruptCheckpoint {
        path: path.to_owned(),
        detail: err.to_string(),
    };
    let (header_len, header) = SafeTensors::read_metadata(&bytes).map_err(corrupt)?;
    // Parsing the whole file checks every entry's offsets against its length.
    SafeTensors::deserialize(&bytes).map_err(corrupt)?;
    let data_start = 8 + header_len;
    let tensors = header.tensors();
    let mut metadata: BTreeMap<String, String> = header
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let range = |offsets: (usize, usize)| data_start + offsets.0..data_start + offsets.1;
    let data = tensors
        .iter()
        .map(|(name, info)| {
            // `deserialize` checked every entry's range against the file.
            let data = bytes.get(range(info.data_offsets)).unwrap_or_default();
            (name.as_str(), data)
        })
        .collect();
    checksum::verify(path, &metadata, &data)?;
    drop(data);
    let entries: HashMap<String, Entry> = tensors
        .into_iter()
        .map(|(name, info)| {
            let entry = Entry {
                dtype: info.dtype,
                shape: info.shape.clone(),
                place: Place::Here(range(info.data_offsets)),
            };
            (name, entry)
        })
        .collect();
    metadata.remove(TENSOR_CHECKSUMS);
    metadata.remove(METADATA_CHECKSUM);
    let checkpoint = Checkpoint {
        path: path.to_owned(),
        device: device.clone(),
        bytes,
        entries,
        metadata,
        ranks: Vec::new(),
    };
    match ShardIndex::of(&checkpoint.metadata, path)? {
        Some(index) => checkpoint.with_ranks(&index),
        None => Ok(checkpoint),
    }
}

impl Checkpoint {
    /// The string metadata saved with it, less the checksums.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The names of every entry, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.entries.keys().cloned().collect();
        names.sort();
        names
    }

    fn error(&self, key: &str, detail: impl Into<String>) -> Error {
        checkpoint_error(&self.path, key, detail)
    }

    /// The entry `key` as a new array on the device, tagged `tag`; it must have `shape` and
    /// `dtype` when they are given.
    pub fn array(&self, key: &str, expect: Option<(&Shape, DType)>, tag: Tag) -> Result<Array> {
        self.array_on(&self.device, key, expect, tag)
    }

    /// [`Checkpoint::array`] on `device` instead.
    fn array_on(
        &self,
        device: &Device,
        key: &str,
        expect: Option<(&Shape, DType)>,
        tag: Tag,
    ) -> Result<Array> {
        let (shape, dtype, bytes) = self.entry(key, expect)?;
        let _tag = device.scoped_tag(tag);
        Ok(Array::from_bytes(device, shape, dtype, &bytes)?)
    }

    /// Chunk `rank` of `ranks` of the entry `key`, flat, zeros past its end (as
    /// [`chunk_of`] cuts it), as a new array on `device` tagged `tag`: only the chunk's bytes
    /// are read. The entry must have `expect`'s whole shape and dtype when given.
    fn chunk_on(
        &self,
        device: &Device,
        key: &str,
        expect: Option<(&Shape, DType)>,
        chunk: (usize, usize),
        tag: Tag,
    ) -> Result<Array> {
        let (len, dtype, bytes) = self.chunk_bytes(key, expect, chunk)?;
        let _tag = device.scoped_tag(tag);
        Ok(Array::from_bytes(device, [len], dtype, &bytes)?)
    }

    /// The length, dtype and bytes of [`Checkpoint::chunk_on`]'s chunk, read from the files
    /// that hold it alone.
    fn chunk_bytes(
        &self,
        key: &str,
        expect: Option<(&Shape, DType)>,
        (rank, ranks): (usize, usize),
    ) -> Result<(usize, DType, Cow<'_, [u8]>)> {
        let (entry, shape, dtype) = self.described(key, expect)?;
        let numel = shape.numel();
        let chunk = numel.div_ceil(ranks.max(1));
        let start = (rank * chunk).min(numel);
        let end = (start + chunk).min(numel);
        let mut bytes = self.flat(key, entry, start..end)?;
        if end - start < chunk {
            bytes.to_mut().resize(chunk * dtype.size(), 0);
        }
        Ok((chunk, dtype, bytes))
    }

    /// The entry `key`'s shape, dtype and bytes, checked against `expect` when given.
    fn entry(
        &self,
        key: &str,
        expect: Option<(&Shape, DType)>,
    ) -> Result<(Shape, DType, Cow<'_, [u8]>)> {
        let (entry, shape, dtype) = self.described(key, expect)?;
        let bytes = self.flat(key, entry, 0..shape.numel())?;
        Ok((shape, dtype, bytes))
    }

    /// An error for restoring the entry `key` on `ranks` ranks where each rank saved a buffer
    /// of its own and the checkpoint was saved on another number.
    fn check_ranks(&self, key: &str, ranks: usize) -> Result<()> {
        let saved = self.ranks.len();
        let per_rank = self.entries.get(key).map(|e| &e.place);
        if matches!(per_rank, Some(Place::PerRank)) && ranks != saved {
            let detail = format!(
                "each of the {saved} ranks that saved it kept blocks of its own chunk (8-bit \
                 optimizer state): resume on {saved} ranks, not {ranks}"
            );
            return Err(self.error(key, detail));
        }
        Ok(())
    }

    /// The entry `key`, its shape and its dtype, checked against `expect` when given.
    fn described(
        &self,
        key: &str,
        expect: Option<(&Shape, DType)>,
    ) -> Result<(&Entry, Shape, DType)> {
        let entry = self
            .entries
            .get(key)
            .ok_or_else(|| self.error(key, "missing"))?;
        let dtype = our_dtype(entry.dtype)
            .ok_or_else(|| self.error(key, format!("unsupported dtype {:?}", entry.dtype)))?;
        let shape = Shape::new(&entry.shape);
        if let Some((want_shape, want_dtype)) = expect
            && (&shape != want_shape || dtype != want_dtype)
        {
            return Err(self.error(
                key,
                format!("holds {shape} of {dtype}, the model needs {want_shape} of {want_dtype}"),
            ));
        }
        Ok((entry, shape, dtype))
    }

    /// The bytes of the flat `elements` of `entry`, the entry `key`: borrowed where they lie
    /// in one file, gathered from the rank files' chunks where they span several.
    fn flat(
        &self,
        key: &str,
        entry: &Entry,
        elements: std::ops::Range<usize>,
    ) -> Result<Cow<'_, [u8]>> {
        let size = our_dtype(entry.dtype).map_or(1, DType::size);
        match &entry.place {
            Place::Here(range) => {
                let (start, end) = (
                    range.start + elements.start * size,
                    range.start + elements.end * size,
                );
                let bytes = self.bytes.get(start..end).filter(|_| end <= range.end);
                Ok(Cow::Borrowed(
                    bytes.ok_or_else(|| self.error(key, "truncated"))?,
                ))
            }
            Place::FirstRank => self.ranks[0].get()?.flat_of(key, elements),
            Place::Chunks | Place::PerRank if elements.is_empty() => Ok(Cow::Borrowed(&[])),
            Place::Chunks | Place::PerRank => {
                let numel: usize = entry.shape.iter().product();
                let chunk = numel.div_ceil(self.ranks.len());
                let (first, last) = (elements.start / chunk, (elements.end - 1) / chunk);
                let within = |k: usize| {
                    let start = elements.start.max(k * chunk) - k * chunk;
                    start..elements.end.min((k + 1) * chunk) - k * chunk
                };
                if first == last {
                    return self.ranks[first].get()?.flat_of(key, within(first));
                }
                let mut bytes = Vec::with_capacity(elements.len() * size);
                for k in first..=last {
                    bytes.extend_from_slice(&self.ranks[k].get()?.flat_of(key, within(k))?);
                }
                Ok(Cow::Owned(bytes))
            }
        }
    }

    /// [`Checkpoint::flat`] of the entry `key`.
    fn flat_of(&self, key: &str, elements: std::ops::Range<usize>) -> Result<Cow<'_, [u8]>> {
        let entry = self
            .entries
            .get(key)
            .ok_or_else(|| self.error(key, "missing"))?;
        self.flat(key, entry, elements)
    }

    /// This index with the rank files `index` names, each one's header checked to be the rank
    /// it is named for and to hold every entry as the index says; their data is read and
    /// checked when first needed.
    fn with_ranks(mut self, index: &ShardIndex) -> Result<Self> {
        if let Some(name) = self.entries.keys().next() {
            return Err(self.error(name, "a sharded checkpoint's index holds no tensor"));
        }
        let ranks = index.files.len();
        let mut headers = Vec::with_capacity(ranks);
        for (rank, file) in index.files.iter().enumerate() {
            let path = self.path.with_file_name(file);
            let header = Header::read(&path)?;
            let of = header.metadata.get(shards::SHARD);
            let of: Option<shards::RankOf> = of.and_then(|of| serde_json::from_str(of).ok());
            let want = shards::RankOf {
                rank,
                ranks,
                step: index.step,
            };
            if of != Some(want) || ShardIndex::of(&header.metadata, &path)?.is_some() {
                let detail = format!(
                    "not rank {rank} of {ranks} at step {}, as the index {} says",
                    index.step,
                    self.path.display()
                );
                return Err(checkpoint_error(&path, shards::SHARD, detail));
            }
            self.ranks.push(RankFile::new(&path, &self.device));
            headers.push((path, header));
        }
        for (name, whole) in &index.entries {
            let numel: usize = whole.shape.iter().product();
            let (holders, want) = match whole.sharded {
                true => (ranks, vec![numel.div_ceil(ranks)]),
                false => (1, whole.shape.clone()),
            };
            for (path, header) in &headers[..holders] {
                let shape = header.shapes.get(name);
                let dtype = header.dtypes.get(name);
                if shape != Some(&want) || dtype != Some(&whole.dtype) {
                    let detail = format!("missing, or not {want:?} of {:?}", whole.dtype);
                    return Err(checkpoint_error(path, name, detail));
                }
            }
            let place = match (whole.sharded, whole.per_rank) {
                (true, true) => Place::PerRank,
                (true, false) => Place::Chunks,
                (false, _) => Place::FirstRank,
            };
            let entry = Entry {
                dtype: whole.dtype,
                shape: whole.shape.clone(),
                place,
            };
            self.entries.insert(name.clone(), entry);
        }
        Ok(self)
    }

    /// Overwrites every parameter of `model` with the entry of its name, which must match its
    /// shape and dtype, in place on the parameter's own device (a streamed weight's host
    /// tier), so that the weights are held once. Nothing changes unless every parameter is
    /// found and fits; a parameter whose data another handle shares gets new memory instead.
    pub fn restore_model(&self, model: &mut dyn Module) -> Result<()> {
        self.check_parameters(model, &|name, t| {
            self.entry(name, Some((t.shape(), t.dtype()))).map(drop)
        })?;
        model.visit_parameters_mut(&mut |name, t| {
            let (shape, dtype, bytes) = self.entry(name, Some((t.shape(), t.dtype())))?;
            let array = t.array_mut();
            match array.is_shared() {
                false => array.write_bytes(dtype, &bytes)?,
                true => {
                    let device = array.device().clone();
                    let _tag = device.scoped_tag(Tag::WEIGHTS);
                    *array = Array::from_bytes(&device, shape, dtype, &bytes)?;
                }
            }
            Ok(())
        })
    }

    /// [`Checkpoint::restore_model`] into a model sharded over ranks: of each saved tensor, of
    /// its parameter's whole shape, the rank's chunk alone is read (from the rank files that
    /// hold it, where the checkpoint was saved sharded over other ranks), so that the rank
    /// never holds a whole tensor.
    pub fn restore_model_in_chunks(
        &self,
        model: &mut dyn Module,
        shards: &ParamShards,
    ) -> Result<()> {
        let (rank, ranks) = (shards.world().rank(), shards.world().world_size());
        // Every chunk is read (and the files holding it checked) before anything changes.
        self.check_parameters(model, &|name, t| match shards.whole_shape(name) {
            Some(whole) => {
                let expected = Some((whole, t.dtype()));
                self.chunk_bytes(name, expected, (rank, ranks)).map(drop)
            }
            None => self.entry(name, Some((t.shape(), t.dtype()))).map(drop),
        })?;
        model.visit_parameters_mut(&mut |name, t| {
            let device = t.device().clone();
            *t.array_mut() = match shards.whole_shape(name) {
                Some(whole) => {
                    let expected = Some((whole, t.dtype()));
                    self.chunk_on(&device, name, expected, (rank, ranks), Tag::WEIGHTS)?
                }
                None => {
                    let expected = Some((t.shape(), t.dtype()));
                    self.array_on(&device, name, expected, Tag::WEIGHTS)?
                }
            };
            Ok(())
        })
    }

    /// Checks, before anything changes, that `check` accepts every parameter of `model` (its
    /// entry found, of its shape and dtype, its bytes read).
    fn check_parameters(
        &self,
        model: &dyn Module,
        check: &dyn Fn(&str, &Tensor) -> Result<()>,
    ) -> Result<()> {
        let mut checked = Ok(());
        model.visit_parameters(&mut |name, t| {
            if checked.is_ok() {
                checked = check(name, t);
            }
        });
        checked
    }

    /// Replaces `optimizer`'s state with the saved one.
    pub fn restore_optimizer(&self, optimizer: &mut dyn Optimizer) -> Result<()> {
        self.restore_optimizer_with(optimizer, &Ok)
    }

    /// Replaces the state of an optimizer over sharded parameters with chunk `rank` of `ranks`
    /// of each saved buffer, reading that chunk alone, as
    /// [`Checkpoint::restore_model_in_chunks`] reads the parameters.
    pub fn restore_optimizer_in_chunks(
        &self,
        optimizer: &mut dyn Optimizer,
        (rank, ranks): (usize, usize),
    ) -> Result<()> {
        let load = |name: &str| {
            let key = format!("{OPTIMIZER}{name}");
            self.check_ranks(&key, ranks)?;
            let tag = Tag::OPTIMIZER_STATE;
            self.chunk_on(&self.device, &key, None, (rank, ranks), tag)
        };
        optimizer.load_state(&load, self.steps()?)
    }

    /// The optimizer's step count saved with the checkpoint.
    fn steps(&self) -> Result<u64> {
        self.metadata
            .get(OPTIMIZER_STEPS)
            .ok_or_else(|| {
                self.error(
                    OPTIMIZER_STEPS,
                    "missing: the checkpoint holds no optimizer",
                )
            })?
            .parse::<u64>()
            .map_err(|err| self.error(OPTIMIZER_STEPS, err.to_string()))
    }

    /// [`Checkpoint::restore_optimizer`], each saved buffer passed through `map` first (cut to
    /// a rank's chunk, for sharded parameters).
    pub fn restore_optimizer_with(
        &self,
        optimizer: &mut dyn Optimizer,
        map: &dyn Fn(Array) -> Result<Array>,
    ) -> Result<()> {
        let load = |name: &str| {
            let key = format!("{OPTIMIZER}{name}");
            self.check_ranks(&key, 1)?;
            map(self.array(&key, None, Tag::OPTIMIZER_STATE)?)
        };
        optimizer.load_state(&load, self.steps()?)
    }
}

/// Deletes the temporary files that saving to `path` left beside it when a process was killed
/// mid-write: files in `path`'s directory named `path`'s file name, `.tmp-` and a process id
/// (digits), and nothing else. This process's own temporary file is kept, as a save may be
/// writing it. Returns the paths removed, sorted; a missing directory removes nothing.
///
/// Call it before saving, when no other process is saving to `path`.
///
/// ```
/// use headroom_nn::checkpoint;
/// let dir = std::env::temp_dir().join(format!("headroom-doc-stale-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("model.safetensors");
/// std::fs::write(dir.join("model.safetensors.tmp-4242424242"), b"half a checkpoint")?;
/// let removed = checkpoint::remove_stale_temporaries(&path)?;
/// assert_eq!(removed, [dir.join("model.safetensors.tmp-4242424242")]);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn remove_stale_temporaries(path: &Path) -> Result<Vec<PathBuf>> {
    let Some(file_name) = path.file_name() else {
        return Ok(Vec::new());
    };
    let mut prefix = file_name.to_owned();
    prefix.push(".tmp-");
    let own = std::process::id().to_string();
    let directory = directory_of(path);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { path, source }
    };
    let Some(listing) = listing(&directory)? else {
        return Ok(Vec::new());
    };
    let mut removed = Vec::new();
    for entry in listing {
        let entry = entry.map_err(io(&directory))?;
        let name = entry.file_name();
        let Some(pid) = name
            .as_encoded_bytes()
            .strip_prefix(prefix.as_encoded_bytes())
        else {
            continue;
        };
        let stale = !pid.is_empty() && pid.iter().all(u8::is_ascii_digit) && pid != own.as_bytes();
        if !stale || !entry.file_type().map_err(io(&entry.path()))?.is_file() {
            continue;
        }
        match std::fs::remove_file(entry.path()) {
            Ok(()) => removed.push(entry.path()),
            // Another process removed it first.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(io(&entry.path())(err)),
        }
    }
    removed.sort();
    Ok(removed)
}

/// The directory `path` lies in (`.` for a bare file name).
fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// The entries of `directory`; none where it does not exist.
fn listing(directory: &Path) -> Result<Option<std::fs::ReadDir>> {
    match std::fs::read_dir(directory) {
        Ok(listing) => Ok(Some(listing)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Io {
            path: directory.to_owned(),
            source,
        }),
    }
}
