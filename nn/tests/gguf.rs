//! The GGUF reader against files written by llama.cpp's Python `gguf` package
//! (`scripts/gguf/make_test_vectors.py`): every tensor type's values equal the package's
//! dequantization bit for bit, every metadata value is read as written, and every way a file
//! can be truncated or corrupt is a typed error naming the file and what in it is at fault.

use std::path::{Path, PathBuf};

use headroom_nn::Error;
use headroom_nn::gguf::{GgufFile, GgufType, Value, ValueType};
use safetensors::SafeTensors;
use serde_json::{Value as Json, json};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/gguf")
        .join(name)
}

fn bytes(name: &str) -> Vec<u8> {
    std::fs::read(data(name)).expect("test data")
}

fn expected() -> Json {
    serde_json::from_slice(&bytes("types.json")).expect("types.json")
}

/// The reference values of each tensor of `file` (a safetensors file of f32), as bits.
fn reference(file: &str) -> Vec<(String, Vec<usize>, Vec<u32>)> {
    let raw = bytes(file);
    let tensors = SafeTensors::deserialize(&raw).expect("reference safetensors");
    tensors
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let bits = view
                .data()
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            (name, view.shape().to_vec(), bits)
        })
        .collect()
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// `value` as types.json writes it.
fn to_json(value: &Value) -> Json {
    let ty = value.value_type().to_string();
    match value {
        Value::U8(v) => json!({"type": ty, "value": v}),
        Value::I8(v) => json!({"type": ty, "value": v}),
        Value::U16(v) => json!({"type": ty, "value": v}),
        Value::I16(v) => json!({"type": ty, "value": v}),
        Value::U32(v) => json!({"type": ty, "value": v}),
        Value::I32(v) => json!({"type": ty, "value": v}),
        Value::U64(v) => json!({"type": ty, "value": v}),
        Value::I64(v) => json!({"type": ty, "value": v}),
        Value::F32(v) => json!({"type": ty, "bits": v.to_bits()}),
        Value::F64(v) => json!({"type": ty, "bits": v.to_bits()}),
        Value::Bool(v) => json!({"type": ty, "value": v}),
        Value::String(v) => json!({"type": ty, "value": v}),
        Value::Array(item, items) => json!({
            "type": ty,
            "item_type": item.to_string(),
            "items": items.iter().map(to_json).collect::<Vec<_>>(),
        }),
    }
}

/// The message of the error opening `bytes` gives.
fn open_error(bytes: Vec<u8>) -> String {
    let err = GgufFile::from_bytes("broken.gguf", bytes).expect_err("a broken file");
    assert!(matches!(err, Error::Gguf { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.starts_with("GGUF broken.gguf: "), "{message}");
    message
}

/// Where the entry of tensor `name` (of `n_dims` dimensions) starts in `file`.
fn entry_at(file: &[u8], name: &str) -> usize {
    let mut pattern = (name.len() as u64).to_le_bytes().to_vec();
    pattern.extend_from_slice(name.as_bytes());
    let at = file
        .windows(pattern.len())
        .rposition(|w| w == pattern)
        .expect("the tensor's entry");
    at + pattern.len()
}

/// Where the value of metadata `key` starts in `file` (at its type id).
fn value_at(file: &[u8], key: &str) -> usize {
    entry_at(file, key)
}

#[test]
fn every_tensor_equals_the_gguf_packages_dequantization_bit_for_bit() {
    let file = GgufFile::open(data("types.gguf")).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), 32);
    assert_eq!(file.data_offset() % 32, 0);
    let expected = expected();
    let tensors = expected["tensors"].as_array().unwrap();
    let names: Vec<_> = file.tensors().iter().map(|t| t.name()).collect();
    let wanted: Vec<_> = tensors
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, wanted);
    let reference = reference("types.safetensors");
    let mut types = Vec::new();
    for t in tensors {
        let name = t["name"].as_str().unwrap();
        let info = file.tensor(name).unwrap();
        assert_eq!(info.ty().to_string(), t["type"].as_str().unwrap(), "{name}");
        let shape: Vec<usize> = serde_json::from_value(t["shape"].clone()).unwrap();
        assert_eq!(info.shape(), shape, "{name}");
        assert_eq!(info.row_len(), *shape.last().unwrap());
        assert_eq!(info.rows() * info.row_len(), info.n_elements());
        let (_, ref_shape, ref_bits) = reference.iter().find(|r| r.0 == name).unwrap();
        assert_eq!(*ref_shape, shape);
        let values = file.read_f32(name).unwrap();
        assert_eq!(bits(&values), *ref_bits, "{name} ({})", info.ty());
        // The same, row by row, through the caller's buffer.
        let mut row = vec![f32::NAN; info.row_len()];
        for r in 0..info.rows() {
            file.read_rows_into(name, r..r + 1, &mut row).unwrap();
            assert_eq!(
                bits(&row),
                ref_bits[r * row.len()..(r + 1) * row.len()],
                "{name} row {r}"
            );
        }
        let mut whole = vec![f32::NAN; info.n_elements()];
        file.read_f32_into(name, &mut whole).unwrap();
        assert_eq!(bits(&whole), *ref_bits);
        assert_eq!(
            file.tensor_bytes(name).unwrap().len() as u64,
            info.n_bytes(),
            "{name}"
        );
        types.push(info.ty());
    }
    use GgufType::*;
    for ty in [
        F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
    ] {
        assert!(types.contains(&ty), "{ty} is tested");
        assert!(ty.is_dequantized());
    }
}

#[test]
fn every_metadata_value_is_read_as_written() {
    let file = GgufFile::open(data("types.gguf")).unwrap();
    let expected = expected();
    let read: Vec<Json> = file
        .metadata()
        .map(|(key, value)| {
            let mut entry = json!({"key": key});
            let fields = to_json(value);
            for (k, v) in fields.as_object().unwrap() {
                entry[k] = v.clone();
            }
            entry
        })
        .collect();
    assert_eq!(Json::Array(read), expected["metadata"]);
}

#[test]
fn typed_getters_convert_and_name_the_key_they_refuse() {
    let file = GgufFile::open(data("types.gguf")).unwrap();
    assert_eq!(file.get_str("general.architecture").unwrap(), "gguf-test");
    assert_eq!(file.get_str("test.string").unwrap(), "héllo, GGUF ✓");
    for (key, value) in [
        ("test.u8", 250),
        ("test.u16", 65535),
        ("test.u32", 4294967295),
        ("test.small_u32", 7),
        ("test.u64", u64::MAX),
    ] {
        assert_eq!(file.get_u64(key).unwrap(), value, "{key}");
    }
    assert_eq!(file.get_i64("test.i8").unwrap(), -128);
    assert_eq!(file.get_i64("test.i64").unwrap(), i64::MIN);
    assert_eq!(file.get_i64("test.u32").unwrap(), 4294967295);
    assert_eq!(file.get_f64("test.f32").unwrap(), f64::from(0.1f32));
    assert_eq!(file.get_f64("test.f64").unwrap(), -1.0 / 3.0);
    assert_eq!(file.get_f64("test.small_u32").unwrap(), 7.0);
    assert!(file.get_bool("test.bool").unwrap());
    assert!(!file.get_bool("test.bool_false").unwrap());
    let strings = file.get_array("test.array.string").unwrap();
    let strings: Vec<_> = strings.iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(strings, ["a", "", "ünïcode", "<0x0A>"]);
    let nested = file.get_array("test.array.nested_i32").unwrap();
    assert_eq!(nested.len(), 3);
    assert_eq!(
        nested[1],
        Value::Array(ValueType::I32, vec![Value::I32(-4)])
    );
    let message = |err: Error| err.to_string();
    let path = data("types.gguf").display().to_string();
    let err = message(file.get_u64("test.i8").unwrap_err());
    assert!(
        err.contains(&path) && err.contains("key `test.i8`"),
        "{err}"
    );
    assert!(err.contains("the i8 -128"), "{err}");
    let err = message(file.get_str("test.u8").unwrap_err());
    assert!(
        err.contains("key `test.u8`: the u8 250 where a string is wanted"),
        "{err}"
    );
    let err = message(file.get_f64("test.array.f32").unwrap_err());
    assert!(err.contains("an array of 3 f32 values"), "{err}");
    let err = message(file.get_u64("llama.block_count").unwrap_err());
    assert!(
        err.contains("key `llama.block_count`: not in the file"),
        "{err}"
    );
    assert!(file.get("llama.block_count").is_none());
}

#[test]
fn a_custom_alignment_places_the_data() {
    let file = GgufFile::open(data("aligned.gguf")).unwrap();
    assert_eq!(file.alignment(), 64);
    assert_eq!(file.get_u64("general.alignment").unwrap(), 64);
    assert_eq!(file.data_offset() % 64, 0);
    for (name, shape, ref_bits) in reference("aligned.safetensors") {
        let info = file.tensor(&name).unwrap();
        assert_eq!(info.offset() % 64, 0);
        assert_eq!(info.shape(), shape);
        assert_eq!(bits(&file.read_f32(&name).unwrap()), ref_bits, "{name}");
    }
}

#[test]
fn version_2_reads_as_version_3() {
    let mut v2 = bytes("types.gguf");
    v2[4..8].copy_from_slice(&2u32.to_le_bytes());
    let v2 = GgufFile::from_bytes("v2.gguf", v2).unwrap();
    let v3 = GgufFile::open(data("types.gguf")).unwrap();
    assert_eq!(v2.version(), 2);
    assert_eq!(v2.tensors(), v3.tensors());
    assert!(v2.metadata().eq(v3.metadata()));
    for info in v3.tensors() {
        let (a, b) = (
            v2.read_f32(info.name()).unwrap(),
            v3.read_f32(info.name()).unwrap(),
        );
        assert_eq!(bits(&a), bits(&b));
    }
}

#[test]
fn every_truncation_is_an_error() {
    for name in ["types.gguf", "aligned.gguf"] {
        let whole = bytes(name);
        for len in 0..whole.len() {
            let err =
                GgufFile::from_bytes(name, whole[..len].to_vec()).expect_err("a truncated file");
            assert!(
                matches!(err, Error::Gguf { .. }),
                "{name} at {len}: {err:?}"
            );
        }
    }
    // Cut inside the data: the tensor whose data is cut is named.
    let mut cut = bytes("types.gguf");
    cut.truncate(cut.len() - 1);
    let err = open_error(cut);
    assert!(
        err.contains("tensor `bf16_special`") && err.contains("past the end"),
        "{err}"
    );
    let mut cut = bytes("types.gguf");
    let f32_end = {
        let file = GgufFile::open(data("types.gguf")).unwrap();
        let info = file.tensor("f32").unwrap();
        file.data_offset() + info.n_bytes() as usize
    };
    cut.truncate(f32_end - 5);
    let err = open_error(cut);
    assert!(err.contains("tensor `f32`"), "{err}");
    // A string running past the end: the key is named.
    let mut file = bytes("types.gguf");
    let at = value_at(&file, "test.string") + 4;
    file[at..at + 8].copy_from_slice(&(1u64 << 20).to_le_bytes());
    let err = open_error(file);
    assert!(err.contains("key `test.string`: truncated"), "{err}");
}

#[test]
fn a_bad_magic_or_version_is_refused() {
    let mut file = bytes("types.gguf");
    file[..4].copy_from_slice(b"GGML");
    let err = open_error(file);
    assert!(err.contains("header: not a GGUF file"), "{err}");
    let err = open_error(b"{\"json\": true}".to_vec());
    assert!(err.contains("not a GGUF file"), "{err}");
    for (version, says) in [
        (1u32, "version 1"),
        (4, "unknown version 4"),
        (0, "unknown version 0"),
        (3u32.swap_bytes(), "big-endian"),
    ] {
        let mut file = bytes("types.gguf");
        file[4..8].copy_from_slice(&version.to_le_bytes());
        let err = open_error(file);
        assert!(err.contains(says), "{version}: {err}");
    }
}

#[test]
fn huge_counts_and_lengths_are_refused_before_allocating() {
    for (at, count) in [(8, u64::MAX), (8, 1 << 40), (16, u64::MAX), (16, 1 << 40)] {
        let mut file = bytes("types.gguf");
        file[at..at + 8].copy_from_slice(&count.to_le_bytes());
        let err = open_error(file);
        assert!(err.contains("header") && err.contains("more than"), "{err}");
    }
    // The first key's length.
    let mut file = bytes("types.gguf");
    file[24..32].copy_from_slice(&(u64::MAX - 3).to_le_bytes());
    let err = open_error(file);
    assert!(err.contains("metadata pair #0: truncated"), "{err}");
    // An array's count, and a string's length inside an array.
    let mut file = bytes("types.gguf");
    let at = value_at(&file, "test.array.u8") + 4 + 4;
    file[at..at + 8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    let err = open_error(file);
    assert!(err.contains("key `test.array.u8`: an array of"), "{err}");
    let mut file = bytes("types.gguf");
    let at = value_at(&file, "test.array.string") + 4 + 4 + 8;
    file[at..at + 8].copy_from_slice(&(1u64 << 50).to_le_bytes());
    let err = open_error(file);
    assert!(err.contains("key `test.array.string`: truncated"), "{err}");
    // A tensor's dimensions whose size overflows, and one past the file.
    let mut file = bytes("types.gguf");
    let at = entry_at(&file, "f32") + 4;
    file[at + 8..at + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    let err = open_error(file);
    assert!(
        err.contains("tensor `f32`: dimensions") && err.contains("overflow"),
        "{err}"
    );
    let mut file = bytes("types.gguf");
    file[at + 8..at + 16].copy_from_slice(&(1u64 << 30).to_le_bytes());
    let err = open_error(file);
    assert!(
        err.contains("tensor `f32`") && err.contains("past the end"),
        "{err}"
    );
    let mut file = bytes("types.gguf");
    let at = entry_at(&file, "f32");
    file[at..at + 4].copy_from_slice(&5u32.to_le_bytes());
    let err = open_error(file);
    assert!(err.contains("tensor `f32`: 5 dimensions"), "{err}");
}

#[test]
fn unknown_types_are_named() {
    // A tensor type id ggml does not have.
    let mut file = bytes("types.gguf");
    let at = entry_at(&file, "q4_k") + 4 + 2 * 8;
    assert_eq!(file[at..at + 4], 12u32.to_le_bytes());
    file[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
    let err = open_error(file);
    assert!(
        err.contains("tensor `q4_k`: unknown tensor type id 99"),
        "{err}"
    );
    // A metadata value type id, and an array item type id, GGUF does not have.
    let mut file = bytes("types.gguf");
    let at = value_at(&file, "test.u16");
    file[at..at + 4].copy_from_slice(&13u32.to_le_bytes());
    let err = open_error(file);
    assert!(
        err.contains("key `test.u16`: unknown value type id 13"),
        "{err}"
    );
    let mut file = bytes("types.gguf");
    let at = value_at(&file, "test.array.i32") + 4;
    file[at..at + 4].copy_from_slice(&77u32.to_le_bytes());
    let err = open_error(file);
    assert!(
        err.contains("key `test.array.i32`: an array of unknown value type id 77"),
        "{err}"
    );
    // A type ggml has that is not dequantized here: the file opens, the tensor is refused.
    let mut file = bytes("types.gguf");
    let at = entry_at(&file, "f32") + 4 + 2 * 8;
    file[at..at + 4].copy_from_slice(&GgufType::I32.id().to_le_bytes());
    let file = GgufFile::from_bytes("i32.gguf", file).unwrap();
    assert_eq!(file.tensor("f32").unwrap().ty(), GgufType::I32);
    let err = file.read_f32("f32").unwrap_err().to_string();
    assert!(
        err.contains("tensor `f32`: stored as I32 (type id 26)"),
        "{err}"
    );
    assert_eq!(file.tensor_bytes("f32").unwrap().len(), 4 * 256 * 4);
}

#[test]
fn corrupt_entries_are_named() {
    // Rows that are not whole blocks.
    let mut file = bytes("types.gguf");
    let at = entry_at(&file, "q4_0") + 4;
    file[at..at + 8].copy_from_slice(&100u64.to_le_bytes());
    let err = open_error(file);
    assert!(
        err.contains("tensor `q4_0`: rows of 100 values are not whole blocks of 32"),
        "{err}"
    );
    // An offset off the alignment.
    let mut file = bytes("types.gguf");
    let at = entry_at(&file, "f16") + 4 + 2 * 8 + 4;
    let offset = u64::from_le_bytes(file[at..at + 8].try_into().unwrap());
    file[at..at + 8].copy_from_slice(&(offset + 2).to_le_bytes());
    let err = open_error(file);
    assert!(
        err.contains("tensor `f16`: its data offset") && err.contains("alignment 32"),
        "{err}"
    );
    // A key twice (test.i8 renamed test.u8), and a bool that is not 0 or 1.
    let mut file = bytes("types.gguf");
    let at = value_at(&file, "test.i8") - 2;
    file[at] = b'u';
    let err = open_error(file);
    assert!(err.contains("key `test.u8`: appears twice"), "{err}");
    let mut file = bytes("types.gguf");
    let at = value_at(&file, "test.bool") + 4;
    file[at] = 7;
    let err = open_error(file);
    assert!(err.contains("key `test.bool`: a bool of byte 7"), "{err}");
    // An alignment that is not a power of two.
    let mut file = bytes("aligned.gguf");
    let at = value_at(&file, "general.alignment") + 4;
    file[at..at + 4].copy_from_slice(&48u32.to_le_bytes());
    let err = open_error(file);
    assert!(
        err.contains("key `general.alignment`: 48 is not a power of two"),
        "{err}"
    );
    // A string that is not UTF-8.
    let mut file = bytes("types.gguf");
    let at = value_at(&file, "test.string") + 4 + 8;
    file[at] = 0xff;
    let err = open_error(file);
    assert!(
        err.contains("key `test.string`") && err.contains("not UTF-8"),
        "{err}"
    );
}

#[test]
fn reads_are_checked_against_the_tensor() {
    let file = GgufFile::open(data("types.gguf")).unwrap();
    let err = file.read_f32("missing").unwrap_err().to_string();
    assert!(
        err.contains("tensor `missing`: no tensor of this name"),
        "{err}"
    );
    let mut out = vec![0.0; 256];
    let err = file
        .read_rows_into("q6_k", 3..5, &mut out)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tensor `q6_k`: rows 3..5 are not within its 4 rows"),
        "{err}"
    );
    let err = file
        .read_rows_into("q6_k", 1..3, &mut out)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rows 1..3 hold 512 values, but 256 were asked for"),
        "{err}"
    );
    let err = file
        .read_f32_into("q6_k", &mut out)
        .unwrap_err()
        .to_string();
    assert!(err.contains("tensor `q6_k`"), "{err}");
    let missing = GgufFile::open(data("no-such-file.gguf")).unwrap_err();
    assert!(matches!(missing, Error::Io { .. }), "{missing:?}");
}
