//! The bytes of a GGUF header's parts, little-endian as the reader reads them: strings,
//! metadata values and pairs, and tensor entries.

use super::{GgufType, Value};

/// Appends a GGUF string: its length as a `u64`, then its UTF-8 bytes.
pub(super) fn string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Appends `v` without its type id; an array's items follow its item type and count.
pub(super) fn value(out: &mut Vec<u8>, v: &Value) {
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
            out.extend_from_slice(&item.id().to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                value(out, item);
            }
        }
    }
}

/// Appends a metadata pair: the key, the value's type id, the value.
pub(super) fn pair(out: &mut Vec<u8>, key: &str, v: &Value) {
    string(out, key);
    out.extend_from_slice(&v.value_type().id().to_le_bytes());
    value(out, v);
}

/// Appends a tensor's entry: its name, its dimensions innermost first (the reverse of the
/// row-major `shape`), its type id and its data's offset in the data section.
pub(super) fn tensor_entry(
    out: &mut Vec<u8>,
    name: &str,
    shape: &[usize],
    ty: GgufType,
    offset: u64,
) {
    string(out, name);
    out.extend_from_slice(&(shape.len() as u32).to_le_bytes());
    for &n in shape.iter().rev() {
        out.extend_from_slice(&(n as u64).to_le_bytes());
    }
    out.extend_from_slice(&ty.id().to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
}

/// The first bytes of a GGUF file of version 3: the magic, the version and the counts.
pub(super) fn preamble(out: &mut Vec<u8>, tensors: usize, pairs: usize) {
    out.extend_from_slice(b"GGUF");
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors as u64).to_le_bytes());
    out.extend_from_slice(&(pairs as u64).to_le_bytes());
}
