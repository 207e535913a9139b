//! A GGUF file as a pretrained model, where a Hugging Face directory is one: `hf::Pretrained`
//! reads its configuration and loads its tensors into a model of its shape, the very
//! parameters `hf::load_llama` loads from the same model's safetensors files (in f32, in bf16,
//! and quantized into NF4 storage), and `hf::check_weights` checks it from its header. A
//! missing, misshapen, undequantizable, extra or non-finite tensor is refused naming the file
//! and the tensor, and a refused load leaves the model as it was.

mod common;

use std::path::{Path, PathBuf};

use common::{TempDir, device, parameter_bytes};
use headroom_autograd::Tensor;
use headroom_kernels::ops::quant::QuantFormat;
use headroom_kernels::{DType, Device};
use headroom_nn::gguf::GgufFile;
use headroom_nn::hf::{self, Pretrained, SpecialTokens};
use headroom_nn::{Gpt, Initializer, Module};

const CASES: [&str; 4] = ["tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-smollm2"];

thread_local! {
    /// One CPU device a test thread builds its models and inputs on.
    static DEVICE: Device = device();
}

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn gguf_path(case: &str) -> PathBuf {
    data().join("gguf").join(format!("{case}.gguf"))
}

/// A model of `pretrained`'s shape in `dtype`, its linear layers stored as `quantize` says.
fn model(pretrained: &Pretrained, dtype: DType, quantize: Option<QuantFormat>) -> Gpt {
    let mut init = Initializer::new(&DEVICE.with(Clone::clone), dtype, 11);
    init.set_quantize(quantize);
    Gpt::new(&mut init, pretrained.gpt_config(0.0)).unwrap()
}

/// The logits of `gpt` for a few tokens, as bits.
fn logits(gpt: &Gpt) -> Vec<u64> {
    let device = DEVICE.with(Clone::clone);
    let ids = Tensor::from_host(&device, [1, 5], &[3u32, 17, 4, 250, 9]).unwrap();
    let out = gpt.forward(&ids).unwrap();
    let values = out.to_f64().unwrap();
    values.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn a_gguf_file_loads_the_parameters_its_safetensors_files_hold() {
    for case in CASES {
        let path = gguf_path(case);
        let pretrained = Pretrained::read(&path).unwrap();
        assert!(matches!(pretrained, Pretrained::Gguf(_)), "{case}");
        assert_eq!(pretrained.source(&path), path);
        let layers = format!("{}.block_count", arch(case));
        assert_eq!(pretrained.field("layers"), layers);
        let from_hf = Pretrained::read(&data().join(case)).unwrap();
        hf::check_weights(&path).unwrap();
        for (dtype, quantize) in [
            (DType::F32, None),
            (DType::BF16, None),
            (DType::F32, Some(QuantFormat::Nf4)),
        ] {
            let mut ours = model(&pretrained, dtype, quantize);
            pretrained.load(&path, &mut ours).unwrap();
            let mut theirs = model(&from_hf, dtype, quantize);
            from_hf.load(&data().join(case), &mut theirs).unwrap();
            assert_eq!(
                parameter_bytes(&ours),
                parameter_bytes(&theirs),
                "{case} {dtype}"
            );
            assert_eq!(ours.quantized_count(), theirs.quantized_count());
            assert_eq!(ours.quantized_count() > 0, quantize.is_some());
            // The tiny Llama 3's file holds the converter's rope scaling (an original context
            // of 8192, not config.json's 512): the same weights, other positions.
            if case != "tiny-llama3" {
                let same = logits(&ours) == logits(&theirs);
                assert!(same, "{case} {dtype} {quantize:?}: other logits");
            }
        }
    }
}

fn arch(case: &str) -> &'static str {
    match case {
        "tiny-qwen2" => "qwen2",
        "tiny-qwen3" => "qwen3",
        _ => "llama",
    }
}

#[test]
fn a_gguf_files_special_tokens_are_its_ids() {
    let tokens = SpecialTokens::read(&gguf_path("tiny-smollm2")).unwrap();
    assert_eq!(
        (tokens.bos, tokens.eos.as_slice(), tokens.pad),
        (Some(0), &[0][..], None)
    );
}

/// `case`'s file with `edit` applied to its bytes (given the file as read), written under `dir`.
fn edited(dir: &TempDir, case: &str, edit: impl FnOnce(&GgufFile, &mut Vec<u8>)) -> PathBuf {
    std::fs::create_dir_all(&dir.0).unwrap();
    let path = gguf_path(case);
    let file = GgufFile::open(&path).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    edit(&file, &mut bytes);
    let out = dir.0.join(format!("{case}.gguf"));
    std::fs::write(&out, bytes).unwrap();
    out
}

/// Where the header entry of `tensor` starts, after its name: its dimension count.
fn entry(bytes: &[u8], tensor: &str) -> usize {
    let mut name = (tensor.len() as u64).to_le_bytes().to_vec();
    name.extend_from_slice(tensor.as_bytes());
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap();
    at + name.len()
}

/// Replaces the first occurrence of `from` with `to` (as long).
fn rename(bytes: &mut [u8], from: &str, to: &str) {
    let at = bytes
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .unwrap();
    bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
}

/// Loads `path` into a model of the tiny case's shape, which must be refused with `says`, and
/// leave the model as it was; `check_weights` must refuse it the same way when `headers`.
fn refused(path: &Path, case: &str, headers: bool, says: &[&str]) {
    let pretrained = Pretrained::read(&gguf_path(case)).unwrap();
    let mut gpt = model(&pretrained, DType::F32, None);
    let before = parameter_bytes(&gpt);
    let err = pretrained.load(path, &mut gpt).unwrap_err().to_string();
    for part in says.iter().chain([&path.display().to_string().as_str()]) {
        assert!(err.contains(part), "{err} lacks {part}");
    }
    assert_eq!(parameter_bytes(&gpt), before, "{err}");
    let checked = hf::check_weights(path);
    match headers {
        true => assert_eq!(checked.unwrap_err().to_string(), err),
        false => checked.unwrap(),
    }
}

#[test]
fn a_tensor_that_does_not_fit_is_refused_before_anything_changes() {
    let dir = TempDir::new("gguf-load-refusals");
    let missing = edited(&dir, "tiny-qwen3", |_, bytes| {
        rename(bytes, "blk.1.ffn_up.weight", "blk.1.ffn_uq.weight")
    });
    refused(
        &missing,
        "tiny-qwen3",
        true,
        &[
            "tensor `blk.1.ffn_up.weight`: missing: the model's `blocks.1.mlp.up.weight` needs it, of shape [48, 32]",
        ],
    );
    // Rows and columns swapped: as many values, another shape.
    let transposed = edited(&dir, "tiny-qwen2", |_, bytes| {
        let at = entry(bytes, "blk.0.ffn_down.weight") + 4;
        let (a, b) = (bytes[at..at + 8].to_vec(), bytes[at + 8..at + 16].to_vec());
        bytes[at..at + 8].copy_from_slice(&b);
        bytes[at + 8..at + 16].copy_from_slice(&a);
    });
    refused(
        &transposed,
        "tiny-qwen2",
        true,
        &[
            "tensor `blk.0.ffn_down.weight`: holds [48, 32], where the model's `blocks.0.mlp.down.weight` needs [32, 48]",
        ],
    );
    // An f32 norm read as 32-bit integers: as many bytes, not a float.
    let integers = edited(&dir, "tiny-qwen2", |_, bytes| {
        let at = entry(bytes, "blk.1.attn_norm.weight") + 4 + 8;
        bytes[at..at + 4].copy_from_slice(&26u32.to_le_bytes());
    });
    refused(
        &integers,
        "tiny-qwen2",
        true,
        &[
            "tensor `blk.1.attn_norm.weight`: stored as I32 (type id 26), which is not dequantized here",
        ],
    );
    // Llama 3's rope factors under another name: a tensor the model has no place for.
    let extra = edited(&dir, "tiny-llama3", |_, bytes| {
        rename(bytes, "rope_freqs.weight", "rope_fraqs.weight")
    });
    let err = hf::check_weights(&extra).unwrap_err().to_string();
    assert!(
        err.contains("tensor `rope_fraqs.weight`: the model has no parameter for this tensor"),
        "{err}"
    );
    // A NaN among the values of the final norm (f32): found before any parameter is written.
    let nan = edited(&dir, "tiny-qwen2", |file, bytes| {
        let info = file.tensor("output_norm.weight").unwrap();
        let at = file.data_offset() + info.offset() as usize + 4 * 5;
        bytes[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    });
    refused(
        &nan,
        "tiny-qwen2",
        false,
        &["tensor `output_norm.weight`: holds NaN at [5]; the weights must be finite"],
    );
}

#[test]
fn a_model_of_another_shape_is_refused_naming_the_key() {
    let qwen3 = Pretrained::read(&gguf_path("tiny-qwen3")).unwrap();
    let mut gpt = model(&qwen3, DType::F32, None);
    let before = parameter_bytes(&gpt);
    let path = gguf_path("tiny-qwen2");
    let err = Pretrained::read(&path)
        .unwrap()
        .load(&path, &mut gpt)
        .unwrap_err()
        .to_string();
    assert!(err.contains("tiny-qwen2.gguf: key `qwen2."), "{err}");
    assert_eq!(parameter_bytes(&gpt), before);
}
