//! Small GGUF files written in memory for unit tests: metadata values and f32 tensors.

use super::encode::{pair, preamble, tensor_entry};
use super::{GgufFile, GgufType, Value};

/// A GGUF file (version 3, alignment 32) of `metadata` and f32 `tensors` (name, row-major
/// shape, values).
pub(crate) fn gguf_bytes(
    metadata: &[(&str, Value)],
    tensors: &[(&str, &[usize], &[f32])],
) -> Vec<u8> {
    let mut out = Vec::new();
    preamble(&mut out, tensors.len(), metadata.len());
    for (key, v) in metadata {
        pair(&mut out, key, v);
    }
    let mut offset = 0u64;
    for (name, shape, values) in tensors {
        tensor_entry(&mut out, name, shape, GgufType::F32, offset);
        offset += (values.len() as u64 * 4).next_multiple_of(32);
    }
    out.resize(out.len().next_multiple_of(32), 0);
    for (_, _, values) in tensors {
        for v in values.iter() {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.resize(out.len().next_multiple_of(32), 0);
    }
    out
}

/// A file holding one 1-D f32 tensor.
pub(crate) fn file_with_tensor(name: &str, values: &[f32]) -> GgufFile {
    let bytes = gguf_bytes(&[], &[(name, &[values.len()], values)]);
    GgufFile::from_bytes("test.gguf", bytes).expect("a valid file")
}
