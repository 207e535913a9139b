//! The Llama family's GGUF layout against the tiny Hugging Face models of tests/data, written as
//! GGUF files the way llama.cpp's converter writes them (`scripts/gguf/make_tiny_gguf.py`,
//! which also checks that transformers reads them back into the same weights): the
//! configuration read from the `{arch}.*` keys is the one `config.json` gives, and every
//! parameter read from the GGUF file, the `llama` file's query and key rows unpermuted, equals
//! the parameter `hf::load_llama` reads from the safetensors files, bit for bit.

mod common;

use std::path::{Path, PathBuf};

use common::{device, parameter_bytes};
use headroom_kernels::DType;
use headroom_kernels::ops::rotary::Llama3Scaling;
use headroom_nn::gguf::{GgufFile, LlamaLayout, permute_rows};
use headroom_nn::hf::{self, LlamaConfig};
use headroom_nn::{Gpt, Initializer};

const CASES: [&str; 4] = ["tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-smollm2"];

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn gguf(case: &str) -> GgufFile {
    GgufFile::open(data().join("gguf").join(format!("{case}.gguf"))).unwrap()
}

/// The configuration `config.json` gives, as a GGUF file of the converter holds it.
fn expected_config(case: &str) -> LlamaConfig {
    let mut config = LlamaConfig::read(&data().join(case)).unwrap();
    config.torch_dtype = None;
    if case == "tiny-llama3" {
        // The converter takes Llama 3's original context from the top level of config.json,
        // 8192 where it is absent, not from rope_scaling (512 here): so do its factors.
        config.options.rope_scaling = Some(Llama3Scaling {
            original_max_position_embeddings: 8192,
            ..config.options.rope_scaling.unwrap()
        });
    }
    config
}

/// True for the cases written as llama.cpp's `llama` architecture (query and key rows permuted).
fn arch_is_llama(case: &str) -> bool {
    matches!(case, "tiny-llama3" | "tiny-smollm2")
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn every_parameter_equals_the_hugging_face_checkpoints() {
    let cpu = device();
    for case in CASES {
        let file = gguf(case);
        let layout = LlamaLayout::read(&file).unwrap();
        assert_eq!(layout.config, expected_config(case), "{case}");
        assert_eq!(layout.permuted, arch_is_llama(case));
        let config = LlamaConfig::read(&data().join(case)).unwrap();
        let mut gpt = Gpt::new(
            &mut Initializer::new(&cpu, DType::F32, 7),
            config.gpt_config(0.0),
        )
        .unwrap();
        hf::load_llama(&data().join(case), &mut gpt).unwrap();
        let params = parameter_bytes(&gpt);
        assert!(
            params
                .iter()
                .any(|(name, _)| name.contains("attn.qkv.weight"))
        );
        for (name, bytes) in params {
            let want: Vec<u32> = bytes
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let mut values = vec![f32::NAN; want.len()];
            layout.read_parameter(&file, &name, &mut values).unwrap();
            assert_eq!(bits(&values), want, "{case}: {name}");
        }
    }
}

#[test]
fn the_permuted_file_differs_from_its_rows_as_stored() {
    // The stored query rows are not transformers' order: reading them unpermuted matters.
    let file = gguf("tiny-llama3");
    let layout = LlamaLayout::read(&file).unwrap();
    let stored = file.read_f32("blk.0.attn_q.weight").unwrap();
    let mut qkv = vec![0.0; (32 + 16 + 16) * 32];
    layout
        .read_parameter(&file, "blocks.0.attn.qkv.weight", &mut qkv)
        .unwrap();
    let q = &qkv[..32 * 32];
    assert_ne!(bits(q), bits(&stored));
    assert_eq!(bits(&permute_rows(q, 4, 32).unwrap()), bits(&stored));
    let k_stored = file.read_f32("blk.0.attn_k.weight").unwrap();
    let k = &qkv[32 * 32..48 * 32];
    assert_eq!(bits(&permute_rows(k, 2, 32).unwrap()), bits(&k_stored));
    let v = &qkv[48 * 32..];
    assert_eq!(
        bits(v),
        bits(&file.read_f32("blk.0.attn_v.weight").unwrap())
    );
}

/// The bytes of `case`'s file with the first `from` after `after` replaced by `to` (as long).
fn patched(case: &str, after: &str, from: &str, to: &str) -> GgufFile {
    assert_eq!(from.len(), to.len());
    let path = data().join("gguf").join(format!("{case}.gguf"));
    let mut bytes = std::fs::read(&path).unwrap();
    let find = |bytes: &[u8], what: &[u8], start: usize| {
        bytes[start..]
            .windows(what.len())
            .position(|w| w == what)
            .map(|p| p + start)
            .unwrap()
    };
    let start = match after {
        "" => 0,
        after => find(&bytes, after.as_bytes(), 0),
    };
    let at = find(&bytes, from.as_bytes(), start);
    bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
    GgufFile::from_bytes(path, bytes).unwrap()
}

#[test]
fn what_the_family_cannot_hold_is_refused_naming_the_key() {
    let file = patched("tiny-qwen2", "general.architecture", "qwen2", "gemma");
    let err = LlamaLayout::read(&file).unwrap_err().to_string();
    assert!(err.contains("tiny-qwen2.gguf"), "{err}");
    assert!(
        err.contains("key `general.architecture`: \"gemma\" is not an architecture"),
        "{err}"
    );
    let file = patched("tiny-qwen2", "", "qwen2.block_count", "qwen2.block_cOunt");
    let err = LlamaLayout::read(&file).unwrap_err().to_string();
    assert!(
        err.contains("key `qwen2.block_count`: not in the file"),
        "{err}"
    );
    let file = patched(
        "tiny-qwen2",
        "",
        "qwen2.attention.head_count_kv",
        "qwen2.attention.head_count_kw",
    );
    // Without it, every head has its own keys and values: 4 of them, where the file's
    // key rows are for 2.
    let layout = LlamaLayout::read(&file).unwrap();
    assert_eq!(layout.config.options.kv_heads, 4);
    let mut qkv = vec![0.0; 3 * 32 * 32];
    let err = layout
        .read_parameter(&file, "blocks.0.attn.qkv.weight", &mut qkv)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tensor `blk.0.attn_k.weight`: shape [16, 32]"),
        "{err}"
    );
}

#[test]
fn reading_a_parameter_names_what_is_missing_or_misfit() {
    let file = patched(
        "tiny-qwen3",
        "",
        "blk.1.ffn_up.weight",
        "blk.1.ffn_uq.weight",
    );
    let layout = LlamaLayout::read(&file).unwrap();
    let mut up = vec![0.0; 48 * 32];
    let err = layout
        .read_parameter(&file, "blocks.1.mlp.up.weight", &mut up)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tensor `blk.1.ffn_up.weight`: missing, where the parameter"),
        "{err}"
    );
    layout
        .read_parameter(&file, "blocks.0.mlp.up.weight", &mut up)
        .unwrap();
    let err = layout
        .read_parameter(&file, "blocks.0.mlp.up.weight", &mut up[1..])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tensor `blk.0.ffn_up.weight`: shape [48, 32]"),
        "{err}"
    );
    let mut more = vec![0.0; 48 * 32 + 1];
    let err = layout
        .read_parameter(&file, "blocks.0.mlp.up.weight", &mut more)
        .unwrap_err()
        .to_string();
    assert!(err.contains("parameter `blocks.0.mlp.up.weight`"), "{err}");
    let err = layout
        .read_parameter(&file, "pos_emb.weight", &mut up)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a parameter of the Llama family"), "{err}");
    assert_eq!(
        layout.tensor_names("blocks.1.attn.k_norm.weight").unwrap(),
        ["blk.1.attn_k_norm.weight"]
    );
}
