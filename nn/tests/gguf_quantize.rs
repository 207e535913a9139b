//! The GGUF quantizers against vectors made by `scripts/gguf/make_quant_vectors.py`: F16, BF16,
//! Q8_0, Q4_0 and Q5_0 bytes equal to those of llama.cpp's Python `gguf` package, Q4_K bytes
//! equal to those of a line-by-line port of ggml's `quantize_row_q4_K_ref` (which the script
//! checks against ggml's own C code when given a build of it), and every type's values read
//! back through the reader as close as the type allows.

use std::path::Path;

use headroom_nn::gguf::{GgufFile, GgufType, GgufWriter, quantize};
use safetensors::SafeTensors;

fn vectors() -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gguf/quant.safetensors");
    std::fs::read(path).expect("test vectors")
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[test]
fn every_type_stores_the_reference_bytes() {
    let raw = vectors();
    let tensors = SafeTensors::deserialize(&raw).unwrap();
    let floats = f32s(tensors.tensor("floats").unwrap().data());
    let blocks = f32s(tensors.tensor("blocks").unwrap().data());
    for (name, ty, input) in [
        ("floats.f16", GgufType::F16, &floats),
        ("floats.bf16", GgufType::BF16, &floats),
        ("blocks.q8_0", GgufType::Q8_0, &blocks),
        ("blocks.q4_0", GgufType::Q4_0, &blocks),
        ("blocks.q5_0", GgufType::Q5_0, &blocks),
        ("blocks.q4_k", GgufType::Q4_K, &blocks),
    ] {
        let want = tensors.tensor(name).unwrap().data();
        let ours = quantize(ty, input).unwrap();
        assert_eq!(ours.len(), want.len(), "{name}");
        if let Some(at) = ours.iter().zip(want).position(|(a, b)| a != b) {
            let block = at / ty.block_bytes();
            panic!(
                "{name}: byte {at} (block {block}) is {}, not {}",
                ours[at], want[at]
            );
        }
    }
}

#[test]
fn a_written_file_reads_back_each_type_within_its_error() {
    let raw = vectors();
    let tensors = SafeTensors::deserialize(&raw).unwrap();
    let blocks = f32s(tensors.tensor("blocks").unwrap().data());
    let rows = blocks.len() / 256;
    let types = [
        GgufType::F32,
        GgufType::F16,
        GgufType::BF16,
        GgufType::Q8_0,
        GgufType::Q5_0,
        GgufType::Q4_0,
        GgufType::Q4_K,
    ];
    let mut writer = GgufWriter::new();
    for ty in types {
        writer.add_tensor(ty.to_string(), &[rows, 256], ty).unwrap();
    }
    let dir = std::env::temp_dir().join(format!("headroom-gguf-quantize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("types.gguf");
    writer.write(&path, |_| Ok(blocks.clone())).unwrap();
    let file = GgufFile::open(&path).unwrap();
    for ty in types {
        let back = file.read_f32(&ty.to_string()).unwrap();
        // The stored bytes are the quantizer's, and read back as the reader dequantizes them.
        assert_eq!(
            file.tensor_bytes(&ty.to_string()).unwrap(),
            quantize(ty, &blocks).unwrap()
        );
        // Each row's worst error against its largest magnitude, over rows of values not so
        // small that the half-float scales lose them.
        for (r, (x, y)) in blocks.chunks(256).zip(back.chunks(256)).enumerate() {
            let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            if amax < 1e-3 {
                continue;
            }
            let worst = x
                .iter()
                .zip(y)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max)
                / amax;
            let bound = match ty {
                GgufType::F32 => 0.0,
                GgufType::F16 => 1.0 / 2048.0,
                GgufType::BF16 => 1.0 / 256.0,
                // Half a step of 127 (254 steps over the range), plus the scale's rounding.
                GgufType::Q8_0 => 0.5 / 127.0 + 1e-3,
                GgufType::Q5_0 => 0.5 / 15.0 + 1e-3,
                GgufType::Q4_0 => 1.0 / 7.0,
                // 15 steps over each sub-block's range, with 6-bit scales and minimums.
                _ => 0.1,
            };
            assert!(worst <= bound, "{ty} row {r}: {worst} > {bound}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
