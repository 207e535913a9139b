//! Small GGUF files written in memory for unit tests: metadata values and f32 tensors.

use super::{GgufFile, Value};

/// The bytes of a GGUF string.
fn string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// The bytes of `value` without its type id.
fn value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(v) => string(out, v),
        Value::Array(item, items) => {
            out.extend_from_slice(&type_id(*item).to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                value(out, item);
            }
        }
    }
}

/// The GGUF id of a value type.
fn type_id(ty: super::ValueType) -> u32 {
    (0..13)
        .find(|&id| super::ValueType::from_id(id) == Some(ty))
        .expect("every type has an id")
}

/// A GGUF file (version 3, alignment 32) of `metadata` and f32 `tensors` (name, row-major
/// shape, values).
pub(crate) fn gguf_bytes(
    metadata: &[(&str, Value)],
    tensors: &[(&str, &[usize], &[f32])],
) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (key, v) in metadata {
        string(&mut out, key);
        out.extend_from_slice(&type_id(v.value_type()).to_le_bytes());
        value(&mut out, v);
    }
    let mut offset = 0u64;
    for (name, shape, values) in tensors {
        string(&mut out, name);
        out.extend_from_slice(&(shape.len() as u32).to_le_bytes());
        for &n in shape.iter().rev() {
            out.extend_from_slice(&(n as u64).to_le_bytes());
        }
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
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
