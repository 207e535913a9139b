//! A GGUF file opened: its header parsed and checked whole, its data mapped and read one
//! tensor (or a range of its rows) at a time.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::ops::{Deref, Range};
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::cursor::Cursor;
use super::dequant::dequantize;
use super::tensor_info::{self, TensorInfo};
use super::value::{Value, ValueType, read_value};
use crate::error::{Error, Result};

/// The first four bytes of every GGUF file.
const MAGIC: [u8; 4] = *b"GGUF";

/// The key that sets the data section's alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// The alignment when [`ALIGNMENT_KEY`] is absent.
const DEFAULT_ALIGNMENT: u64 = 32;

/// The fewest bytes a metadata pair takes: an empty key, a type and a one-byte value.
const MIN_PAIR: usize = 8 + 4 + 1;

/// True when `path` is a file that starts with GGUF's magic bytes (whatever its name), as a
/// pretrained model may be given as one file where a Hugging Face model is a directory.
pub fn is_gguf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0; 4];
    path.is_file()
        && File::open(path).is_ok_and(|mut file| file.read_exact(&mut magic).is_ok())
        && magic == MAGIC
}

/// A file's bytes: mapped, or held.
enum Bytes {
    Mapped(Mmap),
    Held(Vec<u8>),
}

impl Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(map) => map,
            Bytes::Held(bytes) => bytes,
        }
    }
}

/// A GGUF file (llama.cpp's format, versions 2 and 3, little-endian): its metadata and its
/// tensors' entries, read and checked when it is opened, and its tensors' data, mapped and
/// dequantized to f32 on request.
pub struct GgufFile {
    path: PathBuf,
    bytes: Bytes,
    version: u32,
    metadata: Vec<(String, Value)>,
    keys: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    names: HashMap<String, usize>,
    alignment: u64,
    data_offset: usize,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

impl GgufFile {
    /// Opens and maps the file at `path` and reads its header; a file that is not GGUF, or is
    /// truncated or corrupt, is [`Error::Gguf`] naming it and the key or tensor at fault.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only, and every read of it is bounds-checked against its
        // length; a file truncated or rewritten by another process while mapped is outside
        // what the reader promises (as for every reader of mapped model files).
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Self::parse(path.to_owned(), Bytes::Mapped(map))
    }

    /// Reads the header of a GGUF file's `bytes` held in memory; `path` names it in errors.
    pub fn from_bytes(path: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self> {
        Self::parse(path.into(), Bytes::Held(bytes))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The format's version: 2 or 3.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data section's alignment: [`ALIGNMENT_KEY`]'s value, or 32.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Where the data section starts, in bytes from the start of the file.
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    /// The metadata's keys and values, in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The value of `key`, if the file has it.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.keys.get(key).map(|&i| &self.metadata[i].1)
    }

    /// The string of `key`; missing or of another type is an error naming the key.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.typed(key, "a string", Value::as_str)
    }

    /// The integer of `key`, of any integer type, that is not negative.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.typed(key, "an integer of at least 0", Value::as_u64)
    }

    /// The integer of `key`, of any integer type, that fits an `i64`.
    pub fn get_i64(&self, key: &str) -> Result<i64> {
        self.typed(key, "an integer", Value::as_i64)
    }

    /// The float of `key` (f32 or f64), or an integer that `f64` holds exactly.
    pub fn get_f64(&self, key: &str) -> Result<f64> {
        self.typed(key, "a number", Value::as_f64)
    }

    /// The bool of `key`.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.typed(key, "a bool", Value::as_bool)
    }

    /// The array of `key`'s items.
    pub fn get_array(&self, key: &str) -> Result<&[Value]> {
        self.typed(key, "an array", Value::as_array)
    }

    /// The tensors' entries, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The entry of the tensor `name`, if the file has it.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.names.get(name).map(|&i| &self.tensors[i])
    }

    /// The stored bytes of the tensor `name`, as its type lays them out.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        let info = self.info(name)?;
        self.rows_bytes(info, 0..info.rows())
    }

    /// The values of the tensor `name` as f32, in row-major order.
    pub fn read_f32(&self, name: &str) -> Result<Vec<f32>> {
        let info = self.info(name)?;
        self.dequantized(info)?;
        let mut out = vec![0.0; info.n_elements()];
        self.read_rows_into(name, 0..info.rows(), &mut out)?;
        Ok(out)
    }

    /// Writes the values of the tensor `name` as f32 into `out`, which holds exactly as many.
    pub fn read_f32_into(&self, name: &str, out: &mut [f32]) -> Result<()> {
        let rows = self.info(name)?.rows();
        self.read_rows_into(name, 0..rows, out)
    }

    /// Writes the values of `rows` of the tensor `name` (rows as in its row-major
    /// [`shape`](TensorInfo::shape): all but the last dimension flattened) as f32 into `out`,
    /// which holds exactly as many, dequantizing block by block.
    pub fn read_rows_into(&self, name: &str, rows: Range<usize>, out: &mut [f32]) -> Result<()> {
        let info = self.info(name)?;
        self.dequantized(info)?;
        let bytes = self.rows_bytes(info, rows.clone())?;
        let wanted = rows.len() * info.row_len();
        if out.len() != wanted {
            return Err(self.error(
                tensor_item(name),
                format!(
                    "rows {rows:?} hold {wanted} values, but {} were asked for",
                    out.len()
                ),
            ));
        }
        dequantize(info.ty(), bytes, out).map_err(|detail| self.error(tensor_item(name), detail))
    }

    /// The entry of the tensor `name`, or an error naming it.
    fn info(&self, name: &str) -> Result<&TensorInfo> {
        self.tensor(name)
            .ok_or_else(|| self.error(tensor_item(name), "no tensor of this name".into()))
    }

    /// An error unless `info`'s type is one dequantized here.
    fn dequantized(&self, info: &TensorInfo) -> Result<()> {
        match info.ty().is_dequantized() {
            true => Ok(()),
            false => Err(self.error(
                tensor_item(info.name()),
                format!(
                    "stored as {} (type id {}), which is not dequantized here",
                    info.ty(),
                    info.ty().id()
                ),
            )),
        }
    }

    /// The stored bytes of `rows` of `info`.
    fn rows_bytes(&self, info: &TensorInfo, rows: Range<usize>) -> Result<&[u8]> {
        let out_of_range = || {
            self.error(
                tensor_item(info.name()),
                format!("rows {rows:?} are not within its {} rows", info.rows()),
            )
        };
        if rows.start > rows.end || rows.end > info.rows() {
            return Err(out_of_range());
        }
        // The header's checks put every tensor's data within the file.
        let start = self.data_offset + info.offset() as usize;
        let row_bytes = info.row_bytes();
        self.bytes
            .get(start + rows.start * row_bytes..start + rows.end * row_bytes)
            .ok_or_else(out_of_range)
    }

    /// The value of `key` through `pick`, or an error naming the key and what it is.
    fn typed<'a, T>(
        &'a self,
        key: &str,
        wanted: &str,
        pick: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<T> {
        let value = self
            .get(key)
            .ok_or_else(|| self.error(key_item(key), "not in the file".into()))?;
        pick(value).ok_or_else(|| {
            self.error(
                key_item(key),
                format!("{} where {wanted} is wanted", describe(value)),
            )
        })
    }

    /// An [`Error::Gguf`] naming this file.
    pub(super) fn error(&self, item: String, detail: String) -> Error {
        gguf_error(&self.path, item, detail)
    }

    /// Reads and checks the header of `bytes`, the file at `path`.
    fn parse(path: PathBuf, bytes: Bytes) -> Result<Self> {
        let err = |item: String, detail: String| gguf_error(&path, item, detail);
        let header = |detail: String| err("header".into(), detail);
        let mut cur = Cursor::new(&bytes);
        let magic = cur.array::<4>().map_err(header)?;
        if magic != MAGIC {
            return Err(header(format!(
                "not a GGUF file: it starts with {magic:02x?}, not `GGUF`"
            )));
        }
        let version = cur.u32().map_err(header)?;
        match version {
            2 | 3 => {}
            1 => {
                return Err(header(
                    "version 1 (32-bit counts) is not read; only versions 2 and 3 are".into(),
                ));
            }
            v if matches!(v.swap_bytes(), 2 | 3) => {
                return Err(header(format!(
                    "version {v:#x}: a big-endian file; only little-endian files are read"
                )));
            }
            v => {
                return Err(header(format!(
                    "unknown version {v}; only versions 2 and 3 are read"
                )));
            }
        }
        let n_tensors = cur.u64().map_err(header)?;
        let n_pairs = cur.u64().map_err(header)?;
        // What the counts promise must fit in what is left, before anything is allocated.
        let least = u128::from(n_pairs) * MIN_PAIR as u128
            + u128::from(n_tensors) * tensor_info::MIN_ENTRY as u128;
        if least > cur.remaining() as u128 {
            return Err(header(format!(
                "{n_pairs} metadata pairs and {n_tensors} tensors, more than the file's {} \
                 bytes hold",
                bytes.len()
            )));
        }
        let mut metadata = Vec::with_capacity(n_pairs as usize);
        let mut keys = HashMap::with_capacity(n_pairs as usize);
        for i in 0..n_pairs {
            let key = cur
                .string()
                .map_err(|detail| err(format!("metadata pair #{i}"), detail))?;
            let value = cur
                .u32()
                .and_then(|id| {
                    ValueType::from_id(id).ok_or_else(|| format!("unknown value type id {id}"))
                })
                .and_then(|ty| read_value(&mut cur, ty, 0))
                .map_err(|detail| err(key_item(&key), detail))?;
            if keys.insert(key.clone(), metadata.len()).is_some() {
                return Err(err(key_item(&key), "appears twice".into()));
            }
            metadata.push((key, value));
        }
        let alignment = match keys.get(ALIGNMENT_KEY) {
            None => DEFAULT_ALIGNMENT,
            Some(&i) => {
                let value = &metadata[i].1;
                value
                    .as_u64()
                    .filter(|a| a.is_power_of_two())
                    .ok_or_else(|| {
                        err(
                            key_item(ALIGNMENT_KEY),
                            format!("{value} is not a power of two"),
                        )
                    })?
            }
        };
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut names = HashMap::with_capacity(n_tensors as usize);
        for i in 0..n_tensors {
            let name = cur
                .string()
                .map_err(|detail| err(format!("tensor #{i}"), detail))?;
            let info = tensor_info::read_entry(&mut cur, name.clone())
                .map_err(|detail| err(tensor_item(&name), detail))?;
            if info.offset() % alignment != 0 {
                return Err(err(
                    tensor_item(&name),
                    format!(
                        "its data offset {} is not a multiple of the alignment {alignment}",
                        info.offset()
                    ),
                ));
            }
            if names.insert(name.clone(), tensors.len()).is_some() {
                return Err(err(tensor_item(&name), "appears twice".into()));
            }
            tensors.push(info);
        }
        let len = bytes.len() as u64;
        let data_offset = (cur.pos() as u64)
            .checked_next_multiple_of(alignment)
            .ok_or_else(|| header(format!("the alignment {alignment} overflows")))?;
        // Each tensor's data is padded to the alignment, the last one's too, as llama.cpp's and
        // gguf-py's writers pad it (and as ggml's `gguf_init_from_file` reads the data section
        // whole), so that a file cut anywhere is refused.
        for info in &tensors {
            info.n_bytes()
                .checked_next_multiple_of(alignment)
                .and_then(|padded| padded.checked_add(info.offset()))
                .and_then(|end| end.checked_add(data_offset))
                .filter(|&end| end <= len)
                .ok_or_else(|| {
                    err(
                        tensor_item(info.name()),
                        format!(
                            "its {} bytes (padded to a multiple of {alignment}) at offset {} of \
                             the data section, which starts at byte {data_offset}, end past the \
                             end of the file ({len} bytes)",
                            info.n_bytes(),
                            info.offset()
                        ),
                    )
                })?;
        }
        Ok(Self {
            version,
            metadata,
            keys,
            tensors,
            names,
            alignment,
            // At most the file's length where there are tensors; unused where there are none.
            data_offset: usize::try_from(data_offset.min(len)).unwrap_or(usize::MAX),
            bytes,
            path,
        })
    }
}

/// An [`Error::Gguf`].
fn gguf_error(path: &Path, item: String, detail: String) -> Error {
    Error::Gguf {
        path: path.to_owned(),
        item,
        detail,
    }
}

/// How errors name a metadata key.
pub(super) fn key_item(key: &str) -> String {
    format!("key `{key}`")
}

/// How errors name a tensor.
pub(super) fn tensor_item(name: &str) -> String {
    format!("tensor `{name}`")
}

/// A value's type, and the value where it is short.
fn describe(value: &Value) -> String {
    match value {
        Value::String(s) if s.len() > 40 => format!("a string of {} bytes", s.len()),
        Value::Array(ty, items) => format!("an array of {} {ty} values", items.len()),
        other => format!("the {} {other}", other.value_type()),
    }
}
