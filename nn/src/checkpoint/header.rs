//! A checkpoint's header read without its tensors' data: its metadata and each entry's shape
//! (for a sharded checkpoint's index, each entry's whole shape, which its metadata names).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use safetensors::tensor::Dtype;

use super::ShardIndex;
use crate::error::{Error, Result};

/// What a safetensors file's header says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Header {
    /// The string metadata, as saved (checksums included).
    pub metadata: BTreeMap<String, String>,
    /// Each entry's shape by its name.
    pub shapes: BTreeMap<String, Vec<usize>>,
    /// Each of the file's own entries' dtype by its name (not an index's whole entries).
    pub dtypes: BTreeMap<String, Dtype>,
}

impl Header {
    /// The header of the file at `path`. A header that does not fit the file or does not parse
    /// is [`Error::CorruptCheckpoint`].
    pub fn read(path: &Path) -> Result<Self> {
        let io = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let corrupt = |detail: String| Error::CorruptCheckpoint {
            path: path.to_owned(),
            detail,
        };
        let mut file = std::fs::File::open(path).map_err(io)?;
        let mut len = [0; 8];
        file.read_exact(&mut len).map_err(io)?;
        let len = u64::from_le_bytes(len);
        let size = file.metadata().map_err(io)?.len();
        if len > size.saturating_sub(8) {
            return Err(corrupt(format!(
                "a header of {len} bytes in a file of {size}"
            )));
        }
        let mut json = vec![0; len as usize];
        file.read_exact(&mut json).map_err(io)?;
        let header: BTreeMap<String, serde_json::Value> =
            serde_json::from_slice(&json).map_err(|err| corrupt(err.to_string()))?;
        let mut metadata = BTreeMap::new();
        let (mut shapes, mut dtypes) = (BTreeMap::new(), BTreeMap::new());
        for (name, value) in header {
            if name == "__metadata__" {
                metadata = serde_json::from_value(value).map_err(|err| corrupt(err.to_string()))?;
                continue;
            }
            let field = |key: &str| value.get(key).cloned();
            if let Some(shape) = field("shape") {
                let dims = serde_json::from_value(shape)
                    .map_err(|err| corrupt(format!("{name}: {err}")))?;
                shapes.insert(name.clone(), dims);
            }
            if let Some(dtype) = field("dtype") {
                let dtype = serde_json::from_value(dtype)
                    .map_err(|err| corrupt(format!("{name}: {err}")))?;
                dtypes.insert(name, dtype);
            }
        }
        if let Some(index) = ShardIndex::of(&metadata, path)? {
            let whole = index.entries.into_iter().map(|(name, e)| (name, e.shape));
            shapes.extend(whole);
        }
        Ok(Self {
            metadata,
            shapes,
            dtypes,
        })
    }
}
