//! Writing a GGUF file (version 3): metadata and tensor entries first, then each tensor's
//! values asked for one at a time, quantized and written, so that a model is never converted
//! whole in memory.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::encode::{pair, preamble, tensor_entry};
use super::file::{ALIGNMENT_KEY, tensor_item};
use super::quantize::quantize_into;
use super::{GgufType, Value};
use crate::error::{Error, Result};

/// The alignment of the data section and of each tensor's data when [`ALIGNMENT_KEY`] is not
/// set: ggml's default.
const DEFAULT_ALIGNMENT: u64 = 32;

/// The longest tensor name ggml takes: its `GGML_MAX_NAME` (64) less the final NUL.
const MAX_NAME: usize = 63;

/// The most dimensions a ggml tensor has.
const MAX_DIMS: usize = 4;

/// About how many values are quantized and written at a time.
const CHUNK_VALUES: usize = 1 << 20;

/// A tensor of a file to write: its name, row-major shape and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    name: String,
    shape: Vec<usize>,
    ty: GgufType,
    /// Its stored bytes: whole blocks of its type, row after row.
    bytes: u64,
}

impl TensorEntry {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its shape, outermost first (`[rows, cols]`).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The type its values are stored in.
    pub fn ty(&self) -> GgufType {
        self.ty
    }

    /// How many values it holds.
    pub fn n_elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// The length of a row: the last dimension (1 for a scalar).
    pub fn row_len(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    /// How many bytes its data takes, before the padding to the alignment.
    pub fn n_bytes(&self) -> u64 {
        self.bytes
    }
}

/// A GGUF file to write: its metadata pairs and tensor entries, in the order they are set;
/// [`write`](Self::write) then writes the file.
#[derive(Debug, Clone, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    keys: HashMap<String, usize>,
    tensors: Vec<TensorEntry>,
    names: HashMap<String, usize>,
}

impl GgufWriter {
    /// A file of no metadata and no tensors.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`, in place where the key is already set. An array whose items are
    /// not all of its item type, or an alignment that is not a power of two, is an
    /// [`Error::Config`].
    pub fn set(&mut self, key: impl Into<String>, value: Value) -> Result<()> {
        let key = key.into();
        if let Some(detail) = badly_typed(&value) {
            return Err(Error::config(
                "GGUF writer",
                format!("key `{key}`: {detail}"),
            ));
        }
        if key == ALIGNMENT_KEY && !value.as_u64().is_some_and(|a| a.is_power_of_two()) {
            let detail = format!("key `{key}`: {value} is not a power of two");
            return Err(Error::config("GGUF writer", detail));
        }
        match self.keys.get(&key) {
            Some(&i) => self.metadata[i].1 = value,
            None => {
                self.keys.insert(key.clone(), self.metadata.len());
                self.metadata.push((key, value));
            }
        }
        Ok(())
    }

    /// Adds the entry of tensor `name` of row-major `shape`, stored as `ty`. A name given
    /// before or longer than ggml takes (63 bytes), more than four dimensions, a type not
    /// written here or rows that are not whole blocks of it are an [`Error::Config`].
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        shape: &[usize],
        ty: GgufType,
    ) -> Result<()> {
        let name = name.into();
        let refuse = |detail: String| {
            Err(Error::config(
                "GGUF writer",
                format!("tensor `{name}`: {detail}"),
            ))
        };
        if self.names.contains_key(&name) {
            return refuse("added twice".into());
        }
        if name.len() > MAX_NAME {
            return refuse(format!(
                "its name is {} bytes, more than ggml's {MAX_NAME}",
                name.len()
            ));
        }
        if shape.len() > MAX_DIMS {
            return refuse(format!(
                "{} dimensions, more than ggml's {MAX_DIMS}",
                shape.len()
            ));
        }
        if !ty.is_written() {
            return refuse(format!("{ty} is not written here"));
        }
        let row = shape.last().copied().unwrap_or(1);
        if !row.is_multiple_of(ty.block_len()) {
            return refuse(format!(
                "rows of {row} values are not whole blocks of {} ({ty})",
                ty.block_len()
            ));
        }
        let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
        let Some(bytes) = elements
            .map(|n| n / ty.block_len() as u64)
            .and_then(|blocks| blocks.checked_mul(ty.block_bytes() as u64))
        else {
            return refuse(format!("shape {shape:?} overflows 64 bits"));
        };
        self.names.insert(name.clone(), self.tensors.len());
        self.tensors.push(TensorEntry {
            name,
            shape: shape.to_vec(),
            ty,
            bytes,
        });
        Ok(())
    }

    /// The metadata pairs, in order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.keys.get(key).map(|&i| &self.metadata[i].1)
    }

    /// The tensor entries, in order.
    pub fn tensors(&self) -> &[TensorEntry] {
        &self.tensors
    }

    /// The data section's alignment: [`ALIGNMENT_KEY`]'s value, or 32.
    pub fn alignment(&self) -> u64 {
        self.get(ALIGNMENT_KEY)
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// The header: the preamble, the metadata, the tensor entries with their offsets, padded
    /// to the alignment.
    fn header(&self) -> Vec<u8> {
        let alignment = self.alignment();
        let mut out = Vec::new();
        preamble(&mut out, self.tensors.len(), self.metadata.len());
        for (key, value) in &self.metadata {
            pair(&mut out, key, value);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            tensor_entry(&mut out, &t.name, &t.shape, t.ty, offset);
            offset += t.bytes.next_multiple_of(alignment);
        }
        out.resize((out.len() as u64).next_multiple_of(alignment) as usize, 0);
        out
    }

    /// Writes the file at `path`, atomically (a temporary file beside it, synced and renamed
    /// over it), asking `values` for each tensor's values in turn (row-major f32, as many as
    /// its shape holds) and storing them in its type, each tensor's data padded to the
    /// alignment. Returns the file's size. Values of the wrong count, or that the type cannot
    /// hold (a NaN in a quantized block), are [`Error::Gguf`] naming the tensor; an error of
    /// `values` is returned as it is; either way no file is left at `path`'s temporary name.
    pub fn write(
        &self,
        path: &Path,
        mut values: impl FnMut(&TensorEntry) -> Result<Vec<f32>>,
    ) -> Result<u64> {
        let alignment = self.alignment() as usize;
        let header = self.header();
        let mut size = header.len() as u64;
        let mut failure = None;
        crate::checkpoint::write_atomically_with(path, |temporary| {
            let mut out = BufWriter::new(File::create(temporary)?);
            out.write_all(&header)?;
            let mut bytes = Vec::new();
            for entry in &self.tensors {
                let data = match values(entry).and_then(|v| self.check(path, entry, v)) {
                    Ok(data) => data,
                    Err(err) => {
                        failure = Some(err);
                        return Err(std::io::Error::other("the tensor's values failed"));
                    }
                };
                let rows = (CHUNK_VALUES / entry.row_len().max(1)).max(1);
                for chunk in data.chunks(rows * entry.row_len().max(1)) {
                    bytes.clear();
                    if let Err(detail) = quantize_into(entry.ty, chunk, &mut bytes) {
                        failure = Some(gguf_error(path, tensor_item(&entry.name), detail));
                        return Err(std::io::Error::other("the tensor's values failed"));
                    }
                    out.write_all(&bytes)?;
                }
                let padding =
                    (entry.bytes as usize).next_multiple_of(alignment) - entry.bytes as usize;
                out.write_all(&vec![0; padding])?;
                size += (entry.bytes as usize + padding) as u64;
            }
            out.flush()
        })
        .map_err(|err| failure.take().unwrap_or(err))?;
        Ok(size)
    }

    /// `values` of `entry`, when they are as many as its shape holds.
    fn check(&self, path: &Path, entry: &TensorEntry, values: Vec<f32>) -> Result<Vec<f32>> {
        match values.len() == entry.n_elements() {
            true => Ok(values),
            false => Err(gguf_error(
                path,
                tensor_item(&entry.name),
                format!(
                    "{} values given, where its shape {:?} holds {}",
                    values.len(),
                    entry.shape,
                    entry.n_elements()
                ),
            )),
        }
    }
}

/// What is wrong with the types of `value`'s items, if anything.
fn badly_typed(value: &Value) -> Option<String> {
    let Value::Array(ty, items) = value else {
        return None;
    };
    items
        .iter()
        .enumerate()
        .find_map(|(i, item)| match item.value_type() == *ty {
            true => badly_typed(item).map(|detail| format!("item {i}: {detail}")),
            false => Some(format!(
                "item {i} is a {}, in an array of {ty} values",
                item.value_type()
            )),
        })
}

/// An [`Error::Gguf`] about the file written at `path`.
fn gguf_error(path: &Path, item: String, detail: String) -> Error {
    Error::Gguf {
        path: path.to_owned(),
        item,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgufFile;

    #[test]
    fn what_ggml_cannot_take_is_refused_before_writing() {
        let mut w = GgufWriter::new();
        w.add_tensor("a", &[2, 64], GgufType::Q8_0).unwrap();
        let err = |r: Result<()>| r.unwrap_err().to_string();
        assert!(err(w.add_tensor("a", &[2], GgufType::F32)).contains("tensor `a`: added twice"));
        assert!(err(w.add_tensor("b", &[2, 48], GgufType::Q8_0)).contains("rows of 48 values"));
        assert!(err(w.add_tensor("c", &[1, 1, 1, 1, 1], GgufType::F32)).contains("5 dimensions"));
        assert!(err(w.add_tensor("d", &[256], GgufType::Q6_K)).contains("Q6_K is not written"));
        assert!(err(w.add_tensor("e".repeat(64), &[1], GgufType::F32)).contains("64 bytes"));
        let mixed = Value::Array(
            crate::gguf::ValueType::U32,
            vec![Value::U32(1), Value::I32(2)],
        );
        assert!(err(w.set("k", mixed)).contains("key `k`: item 1 is a i32, in an array of u32"));
        assert!(err(w.set(ALIGNMENT_KEY, Value::U32(48))).contains("48 is not a power of two"));
        w.set("k", Value::U8(1)).unwrap();
        w.set("k", Value::U8(2)).unwrap();
        assert_eq!(w.metadata(), [("k".to_owned(), Value::U8(2))]);
    }

    #[test]
    fn a_failed_tensor_leaves_no_file() {
        let dir = std::env::temp_dir().join(format!("headroom-gguf-writer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("failed.gguf");
        let mut w = GgufWriter::new();
        w.add_tensor("a", &[4], GgufType::F32).unwrap();
        w.add_tensor("b", &[32], GgufType::Q4_0).unwrap();
        let err = w
            .write(&path, |_| Ok(vec![0.0; 3]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tensor `a`: 3 values given, where its shape [4] holds 4"),
            "{err}"
        );
        let err = w
            .write(&path, |e| Ok(vec![f32::INFINITY; e.n_elements()]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("tensor `b`: value 0 is inf"), "{err}");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        let size = w.write(&path, |e| Ok(vec![1.0; e.n_elements()])).unwrap();
        let file = GgufFile::open(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
        assert_eq!(file.read_f32("b").unwrap(), vec![1.0; 32]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
