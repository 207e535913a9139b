//! Hugging Face Llama-family directories: tiny Llama 3, SmolLM2, Qwen2, Qwen3 and Mistral
//! models made by transformers (`scripts/hf/make_tiny_llama.py`) give transformers' logits and
//! loss here, from one file or shards, from a Hugging Face cache entry, in f32 or in the bf16
//! they were stored in; every way a directory can fail to fit is a typed error that leaves the
//! model as it was. Exports of each load back bit for bit, in one file or in shards.
//!
//! Set `HEADROOM_KEEP_HF_EXPORT=DIR` to keep each model's f32 export in `DIR/tiny-X` (and a
//! sharded one in `DIR/tiny-X-shards`), for
//! `scripts/hf/check_export.py DIR/tiny-X nn/tests/data/tiny-X/expected.json`.

mod common;

use std::path::Path;

use common::transformers_cases::{assert_transformers_cases, data};
use common::{TempDir, device, parameter_bytes};
use headroom_kernels::{DType, Device};
use headroom_nn::hf::{self, LlamaConfig};
use headroom_nn::{Error, Gpt, GptConfig, Initializer, Module};

const FAMILIES: [&str; 5] = [
    "tiny-llama3",
    "tiny-smollm2",
    "tiny-qwen2",
    "tiny-qwen3",
    "tiny-mistral",
];

/// The model a directory's configuration describes, with weights drawn from `seed`.
fn model(device: &Device, dir: &Path, dtype: DType, seed: u64) -> Gpt {
    let config = LlamaConfig::read(&hf::model_dir(dir).unwrap()).unwrap();
    Gpt::new(
        &mut Initializer::new(device, dtype, seed),
        config.gpt_config(0.0),
    )
    .unwrap()
}

fn loaded(device: &Device, dir: &Path, dtype: DType) -> Gpt {
    let mut gpt = model(device, dir, dtype, 7);
    hf::load_llama(dir, &mut gpt).unwrap();
    gpt
}

fn check_against_transformers(name: &str, dir: &Path) {
    let device = device();
    assert_transformers_cases(name, &loaded(&device, dir, DType::F32));
}

#[test]
fn every_family_gives_transformers_logits_and_loss() {
    for name in FAMILIES {
        check_against_transformers(name, &data(name));
    }
}

#[test]
fn the_configurations_read_as_the_models_they_describe() {
    let read = |name| LlamaConfig::read(&data(name)).unwrap();
    let llama = read("tiny-llama3");
    assert_eq!(llama.architecture, hf::Architecture::Llama);
    assert!(llama.options.rope_scaling.is_some());
    assert!(!llama.tie_word_embeddings);
    let qwen2 = read("tiny-qwen2");
    assert!(qwen2.options.qkv_bias && !qwen2.options.qk_norm && qwen2.tie_word_embeddings);
    let qwen3 = read("tiny-qwen3");
    assert!(qwen3.options.qk_norm && qwen3.options.head_dim == 16);
    // transformers 5 writes the rotary base inside `rope_parameters`.
    assert_eq!(read("tiny-mistral").options.rope_theta, 10_000.0);
    // What Headroom writes, it reads back the same.
    for name in FAMILIES {
        let config = read(name);
        let dir = TempDir::created("config");
        config.write(&dir.0, "float32").unwrap();
        let mut again = LlamaConfig::read(&dir.0).unwrap();
        again.torch_dtype = config.torch_dtype.clone();
        assert_eq!(again, config, "{name}");
    }
}

#[test]
fn a_hugging_face_cache_entry_loads_through_its_snapshot_links() {
    let name = "tiny-llama3";
    let entry = TempDir::created("cache");
    let (blobs, snapshot) = (
        entry.0.join("blobs"),
        entry.0.join("snapshots").join("0123abcd"),
    );
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(entry.0.join("refs")).unwrap();
    std::fs::write(entry.0.join("refs").join("main"), "0123abcd").unwrap();
    for file in std::fs::read_dir(data(name)).unwrap() {
        let file = file.unwrap();
        let blob = blobs.join(format!("blob-{}", file.file_name().to_string_lossy()));
        std::fs::copy(file.path(), &blob).unwrap();
        std::os::unix::fs::symlink(&blob, snapshot.join(file.file_name())).unwrap();
    }
    check_against_transformers(name, &entry.0);
}

#[test]
fn bf16_weights_load_into_bf16_parameters_as_stored() {
    let device = device();
    // Stored in bf16 and sharded: the parameters hold the stored bits.
    let dir = data("tiny-llama3");
    let bf16 = loaded(&device, &dir, DType::BF16);
    let f32 = loaded(&device, &dir, DType::F32);
    for ((name, b), (_, f)) in bf16.named_parameters().iter().zip(f32.named_parameters()) {
        assert_eq!(b.dtype(), DType::BF16);
        let widened = b.array().cast(DType::F32).unwrap().to_bytes().unwrap();
        assert_eq!(widened, f.array().to_bytes().unwrap(), "{name}");
    }
}

/// A copy of the test directory `name` in a temporary directory.
fn copy_of(name: &str) -> TempDir {
    let dir = TempDir::created(name);
    for file in std::fs::read_dir(data(name)).unwrap() {
        let file = file.unwrap();
        std::fs::copy(file.path(), dir.0.join(file.file_name())).unwrap();
    }
    dir
}

/// Rewrites the tensor `key` of the single-file checkpoint in `dir`: `change` gets its shape
/// and f32 values and may rename it (to an empty name: drop it).
fn edit_tensor(
    dir: &Path,
    key: &str,
    change: impl FnOnce(&mut String, &mut Vec<usize>, &mut Vec<f32>),
) {
    use safetensors::tensor::{Dtype, TensorView};
    let path = dir.join(hf::WEIGHTS_FILE);
    let bytes = std::fs::read(&path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut all: Vec<(String, Vec<usize>, Vec<u8>)> = file
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.shape().to_vec(), v.data().to_vec()))
        .collect();
    let at = all.iter().position(|t| t.0 == key).unwrap();
    let (mut name, mut shape, data) = all.remove(at);
    let mut values: Vec<f32> = data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    change(&mut name, &mut shape, &mut values);
    if !name.is_empty() {
        all.push((
            name,
            shape,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ));
    }
    let views = all.iter().map(|(n, s, d)| {
        (
            n.clone(),
            TensorView::new(Dtype::F32, s.clone(), d).unwrap(),
        )
    });
    safetensors::tensor::serialize_to_file(views, None, &path).unwrap();
}

/// Loads `dir` into a model of the tiny Qwen3's shape (or `config`), which must fail and
/// leave the model as it was; returns the error.
fn failed_load(dir: &Path, config: Option<GptConfig>) -> Error {
    let device = device();
    let config = config.unwrap_or_else(|| {
        LlamaConfig::read(&data("tiny-qwen3"))
            .unwrap()
            .gpt_config(0.0)
    });
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 3), config).unwrap();
    let before = parameter_bytes(&gpt);
    let err = hf::load_llama(dir, &mut gpt).unwrap_err();
    assert_eq!(
        parameter_bytes(&gpt),
        before,
        "a failed load changed the model"
    );
    err
}

fn assert_checkpoint_error(err: &Error, want_key: &str, want: &str) {
    let Error::Checkpoint { key, detail, .. } = err else {
        panic!("expected a checkpoint error about `{want_key}`, got {err}");
    };
    assert_eq!(key, want_key, "{err}");
    assert!(detail.contains(want), "{err}");
}

#[test]
fn a_missing_misshapen_non_finite_or_extra_tensor_is_an_error_that_changes_nothing() {
    let k = "model.layers.1.self_attn.k_proj.weight";
    let dir = copy_of("tiny-qwen3");
    edit_tensor(&dir.0, k, |name, _, _| name.clear());
    assert_checkpoint_error(&failed_load(&dir.0, None), k, "missing");

    let dir = copy_of("tiny-qwen3");
    edit_tensor(&dir.0, k, |_, shape, values| {
        shape[0] -= 1;
        values.truncate(shape[0] * shape[1]);
    });
    assert_checkpoint_error(&failed_load(&dir.0, None), k, "needs [32, 32]");

    let dir = copy_of("tiny-qwen3");
    edit_tensor(&dir.0, k, |_, _, values| values[5] = f32::NAN);
    assert_checkpoint_error(&failed_load(&dir.0, None), k, "NaN");

    let dir = copy_of("tiny-qwen3");
    let extra = "model.layers.1.self_attn.k_proj.bias";
    edit_tensor(&dir.0, k, |name, _, _| *name = extra.to_owned());
    // The renamed tensor leaves k_proj missing, which is found first.
    assert_checkpoint_error(&failed_load(&dir.0, None), k, "missing");
}

#[test]
fn the_headers_alone_accept_every_model_and_refuse_a_cut_file_or_a_tensor_out_of_place() {
    let others = ["tiny-gpt2", "tiny-gpt2-untied", "lora-gpt2", "lora-llama3"];
    for name in FAMILIES.iter().chain(&others) {
        hf::check_weights(&data(name)).unwrap_or_else(|err| panic!("{name}: {err}"));
    }
    let dir = copy_of("tiny-qwen3");
    let path = dir.0.join(hf::WEIGHTS_FILE);
    let whole = std::fs::read(&path).unwrap();
    let size = |n: usize| headroom_nn::hf::grouped_digits(n as u64);
    for (cut, want) in [
        (
            &whole[..whole.len() - 1],
            format!(
                "truncated: {} bytes where its header needs {}",
                size(whole.len() - 1),
                size(whole.len())
            ),
        ),
        (
            &whole[..4],
            "4 bytes, shorter than a header's length".to_owned(),
        ),
        (
            &[whole.as_slice(), &[0]].concat(),
            format!(
                "{} bytes where its header needs {}: more",
                size(whole.len() + 1),
                size(whole.len())
            ),
        ),
    ] {
        std::fs::write(&path, cut).unwrap();
        let err = hf::check_weights(&dir.0).unwrap_err();
        assert!(matches!(err, Error::CorruptCheckpoint { .. }), "{err}");
        assert!(err.to_string().contains(&want), "{err}");
    }

    // What loading finds from the tensors, found from the headers.
    let k = "model.layers.1.self_attn.k_proj.weight";
    let dir = copy_of("tiny-qwen3");
    edit_tensor(&dir.0, k, |name, _, _| name.clear());
    assert_checkpoint_error(&hf::check_weights(&dir.0).unwrap_err(), k, "missing");
    let dir = copy_of("tiny-qwen3");
    edit_tensor(&dir.0, k, |_, shape, values| {
        shape[0] -= 1;
        values.truncate(shape[0] * shape[1]);
    });
    assert_checkpoint_error(&hf::check_weights(&dir.0).unwrap_err(), k, "needs [32, 32]");
}

#[test]
fn a_model_of_another_shape_or_family_is_an_error_that_changes_nothing() {
    let dir = data("tiny-qwen3");
    let config = LlamaConfig::read(&dir).unwrap().gpt_config(0.0);
    let other = GptConfig {
        layers: 1,
        ..config
    };
    let err = failed_load(&dir, Some(other));
    assert!(matches!(err, Error::Checkpoint { .. }), "{err}");
    let longer = GptConfig {
        context: config.context + 1,
        ..config
    };
    let err = failed_load(&dir, Some(longer));
    assert_checkpoint_error(&err, "max_position_embeddings", "positions");
    let gpt2 = GptConfig {
        family: headroom_nn::Family::Gpt2,
        ..config
    };
    assert_checkpoint_error(&failed_load(&dir, Some(gpt2)), "architectures", "GPT-2");
}

/// Every tensor of the safetensors files of `dir` (one file, or the shards its index lists) by
/// name: dtype, shape and bytes.
type Stored = std::collections::BTreeMap<String, (safetensors::Dtype, Vec<usize>, Vec<u8>)>;

fn stored(dir: &Path) -> Stored {
    let index = dir.join(hf::INDEX_FILE);
    let files: Vec<String> = match index.exists() {
        true => {
            let json: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
            let mut files: Vec<String> = json["weight_map"]
                .as_object()
                .unwrap()
                .values()
                .map(|f| f.as_str().unwrap().to_owned())
                .collect();
            files.sort();
            files.dedup();
            files
        }
        false => vec![hf::WEIGHTS_FILE.to_owned()],
    };
    let mut all = Stored::new();
    for file in files {
        let bytes = std::fs::read(dir.join(&file)).unwrap();
        let (_, metadata) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        let format = metadata.metadata().as_ref().and_then(|m| m.get("format"));
        assert_eq!(format.map(String::as_str), Some("pt"), "{file}");
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        for (name, view) in st.tensors() {
            let value = (view.dtype(), view.shape().to_vec(), view.data().to_vec());
            assert!(all.insert(name.clone(), value).is_none(), "{name} twice");
        }
    }
    all
}

/// The names of the files in `dir` with their bytes.
fn files_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(entry.path()).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// The options that export `config`'s token ids.
fn export_options(config: &LlamaConfig, dtype: Option<DType>) -> hf::LlamaExport {
    hf::LlamaExport {
        dtype,
        bos: config.bos_token_id,
        eos: config.eos_token_ids.first().copied(),
        ..Default::default()
    }
}

/// Exports the tiny model `name` in f32 and checks that it loads back bit for bit, with the
/// same configuration, the published names and shapes, and transformers' logits.
fn export_round_trip(name: &str) {
    let device = device();
    let config = LlamaConfig::read(&data(name)).unwrap();
    let gpt = loaded(&device, &data(name), DType::F32);
    let out = TempDir::created("export");
    let options = export_options(&config, Some(DType::F32));
    hf::export_llama(&gpt, &out.0, &options).unwrap();
    if let Ok(keep) = std::env::var("HEADROOM_KEEP_HF_EXPORT") {
        let keep = Path::new(&keep);
        let options = hf::LlamaExport {
            overwrite: true,
            ..options.clone()
        };
        hf::export_llama(&gpt, &keep.join(name), &options).unwrap();
        let sharded = hf::LlamaExport {
            shard_bytes: 40_000,
            ..options
        };
        hf::export_llama(&gpt, &keep.join(format!("{name}-shards")), &sharded).unwrap();
    }
    let mut again = model(&device, &out.0, DType::F32, 11);
    hf::load_llama(&out.0, &mut again).unwrap();
    assert_eq!(
        parameter_bytes(&again),
        parameter_bytes(&gpt),
        "{name}: parameters after a round trip"
    );
    let read = LlamaConfig::read(&out.0).unwrap();
    // The class is the options' (a Mistral without a sliding window computes as a Llama).
    let architecture = hf::Architecture::of(&config.options).unwrap();
    assert_eq!(
        architecture,
        match config.architecture {
            hf::Architecture::Mistral => hf::Architecture::Llama,
            other => other,
        }
    );
    assert_eq!(
        read,
        LlamaConfig {
            architecture,
            torch_dtype: Some("float32".into()),
            ..config
        },
        "{name}"
    );
    // The names and shapes of transformers' own files, in f32, in one file.
    let (ours, theirs) = (stored(&out.0), stored(&data(name)));
    let layout = |s: &Stored| -> Vec<(String, Vec<usize>)> {
        s.iter().map(|(n, t)| (n.clone(), t.1.clone())).collect()
    };
    assert_eq!(layout(&ours), layout(&theirs), "{name}");
    assert!(ours.values().all(|t| t.0 == safetensors::Dtype::F32));
    assert!(!out.0.join(hf::INDEX_FILE).exists());
    let generation: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.0.join("generation_config.json")).unwrap())
            .unwrap();
    let want = serde_json::json!({"bos_token_id": options.bos, "eos_token_id": options.eos});
    assert_eq!(generation, want, "{name}");
    check_against_transformers(name, &out.0);
}

#[test]
fn every_family_exports_and_loads_back_bit_for_bit_with_transformers_logits() {
    for name in FAMILIES {
        export_round_trip(name);
    }
}

#[test]
fn a_small_shard_size_writes_shards_and_an_index_that_load_back() {
    let device = device();
    let name = "tiny-qwen3";
    let gpt = loaded(&device, &data(name), DType::F32);
    let out = TempDir::created("shards");
    let limit = 40_000;
    let options = hf::LlamaExport {
        shard_bytes: limit,
        ..Default::default()
    };
    hf::export_llama(&gpt, &out.0, &options).unwrap();
    assert!(!out.0.join(hf::WEIGHTS_FILE).exists());
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.0.join(hf::INDEX_FILE)).unwrap()).unwrap();
    let map = index["weight_map"].as_object().unwrap();
    let mut shards: Vec<&str> = map.values().map(|f| f.as_str().unwrap()).collect();
    shards.sort();
    shards.dedup();
    assert!(shards.len() > 2, "{shards:?}");
    let all = stored(&out.0);
    let total: usize = all.values().map(|t| t.2.len()).sum();
    assert_eq!(index["metadata"]["total_size"], total as u64);
    assert_eq!(map.len(), all.len());
    for (i, shard) in shards.iter().enumerate() {
        let want = format!("model-{:05}-of-{:05}.safetensors", i + 1, shards.len());
        assert_eq!(*shard, want);
        let bytes = std::fs::read(out.0.join(shard)).unwrap();
        let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let held: usize = file.tensors().iter().map(|(_, v)| v.data().len()).sum();
        assert!(
            held as u64 <= limit || file.len() == 1,
            "{shard}: {held} bytes"
        );
        for (tensor, _) in file.tensors() {
            assert_eq!(map[&tensor], *shard, "{tensor}");
        }
    }
    let mut again = model(&device, &out.0, DType::F32, 11);
    hf::load_llama(&out.0, &mut again).unwrap();
    assert_eq!(parameter_bytes(&again), parameter_bytes(&gpt));
    // The same tensors as one file holds.
    let one = TempDir::created("one-file");
    hf::export_llama(&gpt, &one.0, &hf::LlamaExport::default()).unwrap();
    assert_eq!(all, stored(&one.0));
}

#[test]
fn a_bf16_export_of_a_bf16_model_keeps_the_bits_transformers_stored() {
    let device = device();
    let name = "tiny-llama3";
    let gpt = loaded(&device, &data(name), DType::BF16);
    let out = TempDir::created("bf16");
    hf::export_llama(&gpt, &out.0, &hf::LlamaExport::default()).unwrap();
    // transformers stored this model in bf16, sharded: the same tensors, bit for bit.
    assert_eq!(stored(&out.0), stored(&data(name)));
    let config = LlamaConfig::read(&out.0).unwrap();
    assert_eq!(config.torch_dtype.as_deref(), Some("bfloat16"));
    let mut again = model(&device, &out.0, DType::BF16, 11);
    hf::load_llama(&out.0, &mut again).unwrap();
    assert_eq!(parameter_bytes(&again), parameter_bytes(&gpt));
    // An f32 model of the same weights exported as bf16 stores the same bits.
    let f32 = loaded(&device, &data(name), DType::F32);
    let narrowed = TempDir::created("bf16-from-f32");
    let options = hf::LlamaExport {
        dtype: Some(DType::BF16),
        ..Default::default()
    };
    hf::export_llama(&f32, &narrowed.0, &options).unwrap();
    assert_eq!(stored(&narrowed.0), stored(&data(name)));
}

#[test]
fn exporting_over_existing_weights_needs_overwrite_and_touches_nothing_else() {
    let device = device();
    let gpt = loaded(&device, &data("tiny-qwen2"), DType::F32);
    let out = TempDir::created("overwrite");
    std::fs::write(out.0.join("tokenizer.json"), "{}").unwrap();
    hf::export_llama(&gpt, &out.0, &hf::LlamaExport::default()).unwrap();
    let before = files_in(&out.0);
    let shards = hf::LlamaExport {
        shard_bytes: 20_000,
        ..Default::default()
    };
    let err = hf::export_llama(&gpt, &out.0, &shards).unwrap_err();
    assert!(
        matches!(&err, Error::Config { detail, .. } if detail.contains("model.safetensors")
            && detail.contains("overwrite")),
        "{err}"
    );
    assert_eq!(
        files_in(&out.0),
        before,
        "a refused export changed the directory"
    );

    // With overwrite, the shards replace the single file, then a single file the shards.
    let overwrite = |options: hf::LlamaExport| hf::LlamaExport {
        overwrite: true,
        ..options
    };
    hf::export_llama(&gpt, &out.0, &overwrite(shards.clone())).unwrap();
    let names = |dir: &Path| -> Vec<String> { files_in(dir).into_iter().map(|f| f.0).collect() };
    let sharded = names(&out.0);
    assert!(
        !sharded.contains(&hf::WEIGHTS_FILE.to_owned()),
        "{sharded:?}"
    );
    assert!(sharded.contains(&hf::INDEX_FILE.to_owned()), "{sharded:?}");
    assert!(sharded.contains(&"tokenizer.json".to_owned()));
    let mut again = model(&device, &out.0, DType::F32, 11);
    hf::load_llama(&out.0, &mut again).unwrap();
    assert_eq!(parameter_bytes(&again), parameter_bytes(&gpt));
    hf::export_llama(&gpt, &out.0, &overwrite(hf::LlamaExport::default())).unwrap();
    assert_eq!(files_in(&out.0), before);
}

#[test]
fn a_model_no_llama_architecture_holds_is_a_config_error_that_writes_nothing() {
    let device = device();
    let config = LlamaConfig::read(&data("tiny-qwen2"))
        .unwrap()
        .gpt_config(0.0);
    let headroom_nn::Family::Llama(options) = config.family else {
        unreachable!()
    };
    let both = GptConfig {
        family: headroom_nn::Family::Llama(headroom_nn::LlamaOptions {
            qk_norm: true,
            ..options
        }),
        ..config
    };
    let gpt2 = GptConfig {
        family: headroom_nn::Family::Gpt2,
        ..config
    };
    let out = TempDir::created("refused");
    let dir = out.0.join("model");
    let refuse = |gpt: &Gpt, options: hf::LlamaExport, want: &str| {
        let err = hf::export_llama(gpt, &dir, &options).unwrap_err();
        assert!(
            matches!(&err, Error::Config { detail, .. } if detail.contains(want)),
            "{err}"
        );
        assert!(!dir.exists(), "a refused export wrote {}", dir.display());
    };
    for (config, want) in [(gpt2, "GPT-2"), (both, "both")] {
        let gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 1), config).unwrap();
        refuse(&gpt, hf::LlamaExport::default(), want);
    }
    let gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 1), config).unwrap();
    let f64 = hf::LlamaExport {
        dtype: Some(DType::F64),
        ..Default::default()
    };
    refuse(&gpt, f64, "f64");
    let zero = hf::LlamaExport {
        shard_bytes: 0,
        ..Default::default()
    };
    refuse(&gpt, zero, "shard_bytes");
}
