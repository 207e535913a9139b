//! One safetensors file read whole or written at once, with errors that name it.

use std::collections::HashMap;
use std::path::Path;

use headroom_kernels::DType;
use safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorView};

use crate::error::{Error, Result};

/// The file name of a model directory's weights.
pub const WEIGHTS_FILE: &str = "model.safetensors";

/// The bytes of the file at `path`.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })
}

/// `bytes` (read from `path`) as safetensors; anything else is [`Error::CorruptCheckpoint`].
pub(crate) fn parse<'a>(path: &Path, bytes: &'a [u8]) -> Result<SafeTensors<'a>> {
    SafeTensors::deserialize(bytes).map_err(|err| Error::CorruptCheckpoint {
        path: path.to_owned(),
        detail: err.to_string(),
    })
}

/// Writes `tensors` (name, shape, f32 bytes) to `path` atomically, with transformers' metadata
/// `{"format": "pt"}`.
pub(crate) fn write_f32(path: &Path, tensors: &[(String, Vec<usize>, Vec<u8>)]) -> Result<()> {
    let views = tensors
        .iter()
        .map(|(key, dims, bytes)| {
            let view = TensorView::new(Dtype::F32, dims.clone(), bytes).map_err(|err| {
                Error::Checkpoint {
                    path: path.to_owned(),
                    key: key.clone(),
                    detail: err.to_string(),
                }
            })?;
            Ok((key.as_str(), view))
        })
        .collect::<Result<Vec<_>>>()?;
    let metadata = HashMap::from([("format".to_owned(), "pt".to_owned())]);
    let buffer = safetensors::tensor::serialize(views, Some(metadata)).map_err(|err| {
        Error::CorruptCheckpoint {
            path: path.to_owned(),
            detail: err.to_string(),
        }
    })?;
    crate::checkpoint::write_atomically(path, &buffer)
}

/// Headroom's dtype of a floating-point safetensors dtype.
pub(crate) fn float_dtype(dtype: Dtype) -> Option<DType> {
    match dtype {
        Dtype::F32 => Some(DType::F32),
        Dtype::F64 => Some(DType::F64),
        Dtype::F16 => Some(DType::F16),
        Dtype::BF16 => Some(DType::BF16),
        _ => None,
    }
}
