//! The GGUF writer against the reader and the Python `gguf` package's files: every metadata
//! value of `tests/data/gguf/types.gguf` (one of each GGUF type, nested arrays included)
//! written again reads back as it was, in order, beside tensors of every written type.

use std::path::Path;

use headroom_nn::gguf::{GgufFile, GgufType, GgufWriter, quantize};

#[test]
fn every_value_type_and_tensor_type_reads_back_as_written() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gguf/types.gguf");
    let source = GgufFile::open(&source).unwrap();
    let mut writer = GgufWriter::new();
    for (key, value) in source.metadata() {
        writer.set(key, value.clone()).unwrap();
    }
    let values: Vec<f32> = (0..3 * 256)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
        .collect();
    let types = [
        GgufType::F32,
        GgufType::F16,
        GgufType::BF16,
        GgufType::Q8_0,
        GgufType::Q4_0,
        GgufType::Q5_0,
        GgufType::Q4_K,
    ];
    for ty in types {
        writer.add_tensor(format!("t.{ty}"), &[3, 256], ty).unwrap();
    }
    writer
        .add_tensor("t.3d", &[2, 3, 128], GgufType::F32)
        .unwrap();
    writer.add_tensor("t.scalar", &[], GgufType::F32).unwrap();
    let dir = std::env::temp_dir().join(format!("headroom-gguf-writer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("all.gguf");
    writer
        .write(&path, |entry| Ok(values[..entry.n_elements()].to_vec()))
        .unwrap();
    let file = GgufFile::open(&path).unwrap();
    let written: Vec<_> = file.metadata().collect();
    let wanted: Vec<_> = source.metadata().collect();
    assert_eq!(written, wanted);
    assert_eq!(file.data_offset() % 32, 0);
    for ty in types {
        let name = format!("t.{ty}");
        let info = file.tensor(&name).unwrap();
        assert_eq!((info.shape(), info.ty()), (&[3, 256][..], ty));
        assert_eq!(info.offset() % 32, 0, "{name}");
        assert_eq!(
            file.tensor_bytes(&name).unwrap(),
            quantize(ty, &values).unwrap()
        );
    }
    assert_eq!(file.tensor("t.3d").unwrap().shape(), [2, 3, 128]);
    assert_eq!(file.read_f32("t.3d").unwrap(), values);
    assert_eq!(file.read_f32("t.scalar").unwrap(), values[..1]);
    std::fs::remove_dir_all(&dir).unwrap();
}
