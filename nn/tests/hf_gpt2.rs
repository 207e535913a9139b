//! Hugging Face GPT-2 directories: a tiny model made by transformers
//! (`scripts/hf/make_tiny_gpt2.py`) gives transformers' logits and loss here, survives an
//! export and a second import bit for bit, loads into a smaller context, and every way a
//! directory can fail to fit is a typed error that leaves the model as it was.
//!
//! Set `HEADROOM_KEEP_HF_EXPORT=DIR` to keep the tied model's export in `DIR` and the untied
//! one's in `DIR-untied`, for `scripts/hf/check_export.py DIR` (and
//! `scripts/hf/check_export.py DIR-untied nn/tests/data/tiny-gpt2-untied/expected.json`).

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::{TempDir, device, parameter_bytes};
use headroom_autograd::Tensor;
use headroom_kernels::{DType, Device};
use headroom_nn::hf::{self, Gpt2Config};
use headroom_nn::{Error, Family, Gpt, GptConfig, Initializer, Module};
use safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorView};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

const TIED: &str = "tiny-gpt2";
const UNTIED: &str = "tiny-gpt2-untied";

/// What transformers computed for the tiny model (`expected.json`).
struct Expected {
    ids: Vec<u32>,
    logits: Vec<f64>,
    loss: f64,
}

fn expected(name: &str) -> Expected {
    let text = std::fs::read(data(name).join("expected.json")).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&text).unwrap();
    let numbers = |key: &str| -> Vec<f64> {
        json[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    Expected {
        ids: numbers("ids").into_iter().map(|v| v as u32).collect(),
        logits: numbers("logits"),
        loss: json["loss"].as_f64().unwrap(),
    }
}

/// A GPT of `config` with weights drawn from `seed` (so that a load visibly changes them).
fn gpt(device: &Device, config: GptConfig, seed: u64) -> Gpt {
    Gpt::new(&mut Initializer::new(device, DType::F32, seed), config).unwrap()
}

/// The GPT a directory's configuration describes, loaded from it.
fn loaded(device: &Device, dir: &Path) -> Gpt {
    let config = Gpt2Config::read(dir).unwrap().gpt_config(0.0);
    let mut model = gpt(device, config, 7);
    hf::load_gpt2(dir, &mut model).unwrap();
    model
}

fn logits(model: &Gpt, ids: &[u32]) -> Vec<f64> {
    let ids = Tensor::from_host(model.tok_emb.weight.device(), [1, ids.len()], ids).unwrap();
    model.forward(&ids).unwrap().to_f64().unwrap()
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// transformers' loss with labels = ids: positions `0..T-1` predicting `1..T`.
fn shifted_loss(model: &Gpt, ids: &[u32]) -> f64 {
    let device = model.tok_emb.weight.device();
    let t = ids.len() - 1;
    let inputs = Tensor::from_host(device, [1, t], &ids[..t]).unwrap();
    let targets = Tensor::from_host(device, [1, t], &ids[1..]).unwrap();
    model
        .loss(&inputs, &targets, None)
        .unwrap()
        .to_f64()
        .unwrap()[0]
}

fn check_against_transformers(name: &str) {
    let device = device();
    let dir = data(name);
    let model = loaded(&device, &dir);
    let want = expected(name);
    let got = logits(&model, &want.ids);
    let diff = max_abs_diff(&got, &want.logits);
    assert!(diff < 1e-4, "{name}: logits differ by up to {diff}");
    let loss = shifted_loss(&model, &want.ids);
    let relative = (loss - want.loss).abs() / want.loss.abs();
    eprintln!("{name}: logits within {diff:e}, loss {loss} ({relative:e} relative)");
    assert!(
        relative < 1e-5,
        "{name}: loss {loss} against transformers' {} ({relative:e} relative)",
        want.loss
    );
}

#[test]
fn the_tied_model_in_f16_gives_transformers_logits_and_loss() {
    check_against_transformers(TIED);
}

#[test]
fn the_untied_model_in_bf16_gives_transformers_logits_and_loss() {
    check_against_transformers(UNTIED);
}

#[test]
fn the_configuration_reads_as_the_gpt_it_describes() {
    let config = Gpt2Config::read(&data(TIED)).unwrap();
    assert_eq!(
        config.gpt_config(0.1),
        GptConfig {
            vocab: 320,
            context: 64,
            width: 16,
            heads: 4,
            layers: 2,
            dropout: 0.1,
            tie_embeddings: true,
            family: Family::Gpt2,
        }
    );
    assert_eq!(config.layer_norm_epsilon, 1e-5);
    assert!(!Gpt2Config::read(&data(UNTIED)).unwrap().tie_word_embeddings);
    // What Headroom writes, it reads back the same.
    let dir = TempDir::new("config");
    std::fs::create_dir_all(&dir.0).unwrap();
    config.write(&dir.0).unwrap();
    assert_eq!(Gpt2Config::read(&dir.0).unwrap(), config);
}

/// One stored tensor: its name, dtype, shape and bytes.
type Stored = (String, Dtype, Vec<usize>, Vec<u8>);

/// Every tensor of a safetensors file, sorted by name.
type Tensors = Vec<Stored>;

fn tensors(path: &Path) -> (Tensors, Option<HashMap<String, String>>) {
    let bytes = std::fs::read(path).unwrap();
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let mut all: Tensors = file
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    (all, header.metadata().clone())
}

fn write_tensors(path: &Path, all: &Tensors) {
    let views = all.iter().map(|(n, dtype, shape, data)| {
        (
            n.clone(),
            TensorView::new(*dtype, shape.clone(), data).unwrap(),
        )
    });
    let metadata = HashMap::from([("format".to_owned(), "pt".to_owned())]);
    safetensors::tensor::serialize_to_file(views, Some(metadata), path).unwrap();
}

fn round_trip(name: &str) {
    let device = device();
    let model = loaded(&device, &data(name));
    let first = TempDir::new("export");
    hf::export_gpt2(&model, &first.0, None).unwrap();
    if let Ok(keep) = std::env::var("HEADROOM_KEEP_HF_EXPORT") {
        let keep = match name {
            TIED => keep,
            _ => format!("{keep}-untied"),
        };
        hf::export_gpt2(&model, Path::new(&keep), None).unwrap();
    }

    let again = loaded(&device, &first.0);
    assert_eq!(
        parameter_bytes(&again),
        parameter_bytes(&model),
        "{name}: parameters after a round trip"
    );
    assert_eq!(again.config(), model.config());
    let second = TempDir::new("export-again");
    hf::export_gpt2(&again, &second.0, None).unwrap();
    let (one, metadata) = tensors(&first.0.join(hf::WEIGHTS_FILE));
    let (two, _) = tensors(&second.0.join(hf::WEIGHTS_FILE));
    assert!(
        one == two,
        "{name}: the second export differs from the first"
    );
    assert_eq!(
        metadata,
        Some(HashMap::from([("format".to_owned(), "pt".to_owned())]))
    );
    assert_eq!(
        std::fs::read(first.0.join(hf::CONFIG_FILE)).unwrap(),
        std::fs::read(second.0.join(hf::CONFIG_FILE)).unwrap()
    );

    // The names and layout transformers' own files have: the same tensors as the original
    // (less the half precision), f32.
    let (original, _) = tensors(&data(name).join(hf::WEIGHTS_FILE));
    let names = |all: &Tensors| -> Vec<(String, Vec<usize>)> {
        all.iter().map(|t| (t.0.clone(), t.2.clone())).collect()
    };
    assert_eq!(names(&one), names(&original));
    assert!(one.iter().all(|t| t.1 == Dtype::F32));
    let has_head = one.iter().any(|t| t.0 == "lm_head.weight");
    assert_eq!(has_head, name == UNTIED);
}

#[test]
fn an_export_imports_again_bit_for_bit_tied() {
    round_trip(TIED);
}

#[test]
fn an_export_imports_again_bit_for_bit_untied() {
    round_trip(UNTIED);
}

#[test]
fn both_spellings_of_the_names_load_the_same_weights() {
    let device = device();
    let model = loaded(&device, &data(TIED));
    let dir = copy_of(TIED, "unprefixed");
    let path = dir.0.join(hf::WEIGHTS_FILE);
    edit(&path, |all| {
        for t in all.iter_mut() {
            t.0 = t.0.trim_start_matches("transformer.").to_owned();
        }
        // The original `gpt2` upload also holds the attention's mask buffers.
        let mask = ("h.0.attn.bias".to_owned(), Dtype::F32, vec![1], vec![0; 4]);
        let masked = (
            "h.1.attn.masked_bias".to_owned(),
            Dtype::F32,
            vec![],
            vec![0; 4],
        );
        all.extend([mask, masked]);
    });
    let again = loaded(&device, &dir.0);
    assert_eq!(parameter_bytes(&again), parameter_bytes(&model));
}

#[test]
fn a_tied_head_may_be_stored_when_it_equals_the_embedding() {
    let device = device();
    let model = loaded(&device, &data(TIED));
    let dir = copy_of(TIED, "stored-head");
    let path = dir.0.join(hf::WEIGHTS_FILE);
    edit(&path, |all| {
        let wte = all
            .iter()
            .find(|t| t.0 == "transformer.wte.weight")
            .unwrap();
        let head = (
            "lm_head.weight".to_owned(),
            wte.1,
            wte.2.clone(),
            wte.3.clone(),
        );
        all.push(head);
    });
    assert_eq!(
        parameter_bytes(&loaded(&device, &dir.0)),
        parameter_bytes(&model)
    );

    // A different head cannot be tied.
    edit(&path, |all| {
        let head = all.iter_mut().find(|t| t.0 == "lm_head.weight").unwrap();
        head.3[0] ^= 1;
    });
    let err = failed_load(&dir.0, None);
    assert_checkpoint_error(&err, "lm_head.weight", &["differs"]);
}

#[test]
fn the_norms_take_the_configured_epsilon() {
    let device = device();
    let dir = copy_of(TIED, "epsilon");
    edit_config(&dir.0, |map| {
        map.insert("layer_norm_epsilon".into(), serde_json::json!(1e-3));
    });
    let model = loaded(&device, &dir.0);
    assert!(
        model
            .blocks
            .iter()
            .all(|b| b.ln1.eps() == 1e-3 && b.ln2.eps() == 1e-3)
    );
    assert_eq!(model.ln_f.eps(), 1e-3);
    let out = TempDir::new("epsilon-export");
    hf::export_gpt2(&model, &out.0, None).unwrap();
    assert_eq!(Gpt2Config::read(&out.0).unwrap().layer_norm_epsilon, 1e-3);
}

#[test]
fn a_smaller_context_crops_the_position_table() {
    let device = device();
    let full = loaded(&device, &data(TIED));
    let mut config = Gpt2Config::read(&data(TIED)).unwrap().gpt_config(0.0);
    config.context = 32;
    let mut cropped = gpt(&device, config, 3);
    hf::load_gpt2(&data(TIED), &mut cropped).unwrap();
    let rows = full
        .pos_emb
        .as_ref()
        .unwrap()
        .weight
        .values()
        .unwrap()
        .narrow(0, 0, 32)
        .unwrap();
    assert_eq!(
        cropped
            .pos_emb
            .as_ref()
            .unwrap()
            .weight
            .values()
            .unwrap()
            .to_f64()
            .unwrap(),
        rows.to_f64().unwrap()
    );
    let ids = expected(TIED).ids;
    let diff = max_abs_diff(&logits(&cropped, &ids), &logits(&full, &ids));
    assert!(diff < 1e-6, "cropped logits differ by {diff}");

    // A longer context than the table is an error naming it.
    config.context = 65;
    let mut longer = gpt(&device, config, 3);
    let before = parameter_bytes(&longer);
    let err = hf::load_gpt2(&data(TIED), &mut longer).unwrap_err();
    assert_checkpoint_error(&err, "transformer.wpe.weight", &["[64, 16]", "[65, 16]"]);
    assert_eq!(parameter_bytes(&longer), before);
}

/// A copy of the test directory `name` (configuration and weights) in a temporary directory.
fn copy_of(name: &str, purpose: &str) -> TempDir {
    let dir = TempDir::new(purpose);
    std::fs::create_dir_all(&dir.0).unwrap();
    for file in [hf::CONFIG_FILE, hf::WEIGHTS_FILE] {
        std::fs::copy(data(name).join(file), dir.0.join(file)).unwrap();
    }
    dir
}

/// Rewrites the safetensors file at `path` through `change`.
fn edit(path: &Path, change: impl FnOnce(&mut Tensors)) {
    let (mut all, _) = tensors(path);
    change(&mut all);
    write_tensors(path, &all);
}

/// Rewrites the tensor `name` of the checkpoint at `path` through `change`.
fn edit_tensor(path: &Path, name: &str, change: impl FnOnce(&mut Stored)) {
    edit(path, |all| {
        change(all.iter_mut().find(|t| t.0 == name).unwrap())
    });
}

/// Rewrites the `config.json` in `dir` through `change`.
fn edit_config(dir: &Path, change: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let path = dir.join(hf::CONFIG_FILE);
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    change(json.as_object_mut().unwrap());
    std::fs::write(&path, serde_json::to_vec(&json).unwrap()).unwrap();
}

/// Loads `dir` into a GPT of the tiny model's shape (or `config`), which must fail and leave
/// the model as it was; returns the error.
fn failed_load(dir: &Path, config: Option<GptConfig>) -> Error {
    let device = device();
    let config = config.unwrap_or_else(|| Gpt2Config::read(&data(TIED)).unwrap().gpt_config(0.0));
    let mut model = gpt(&device, config, 11);
    let before = parameter_bytes(&model);
    let err = hf::load_gpt2(dir, &mut model).unwrap_err();
    assert_eq!(
        parameter_bytes(&model),
        before,
        "a failed load changed the model"
    );
    assert!(
        model.blocks.iter().all(|b| b.ln1.eps() == 1e-5) && model.ln_f.eps() == 1e-5,
        "a failed load changed an epsilon"
    );
    err
}

fn assert_checkpoint_error(err: &Error, want_key: &str, details: &[&str]) {
    let Error::Checkpoint { key, detail, .. } = err else {
        panic!("expected a checkpoint error about `{want_key}`, got {err}");
    };
    assert_eq!(key, want_key, "{err}");
    for part in details {
        assert!(detail.contains(part), "`{part}` is not in: {err}");
    }
}

#[test]
fn a_directory_without_a_configuration_is_an_io_error_naming_it() {
    let dir = copy_of(TIED, "no-config");
    std::fs::remove_file(dir.0.join(hf::CONFIG_FILE)).unwrap();
    for err in [
        Gpt2Config::read(&dir.0).unwrap_err(),
        failed_load(&dir.0, None),
    ] {
        let Error::Io { path, .. } = &err else {
            panic!("expected an I/O error, got {err}");
        };
        assert_eq!(path, &dir.0.join(hf::CONFIG_FILE));
    }
    let missing = copy_of(TIED, "no-weights");
    std::fs::remove_file(missing.0.join(hf::WEIGHTS_FILE)).unwrap();
    let err = failed_load(&missing.0, None);
    assert!(
        matches!(&err, Error::Io { path, .. } if path.ends_with(hf::WEIGHTS_FILE)),
        "{err}"
    );
}

#[test]
fn a_configuration_headroom_does_not_compute_is_an_error_naming_the_field() {
    use serde_json::{Value, json};
    let cases: [(&str, Value, &str); 8] = [
        ("activation_function", json!("relu"), "relu"),
        ("activation_function", json!(3), "3"),
        ("model_type", json!("llama"), "llama"),
        (
            "scale_attn_by_inverse_layer_idx",
            json!(true),
            "not supported",
        ),
        ("reorder_and_upcast_attn", json!(true), "not supported"),
        ("n_inner", json!(100), "100"),
        ("n_head", json!(5), "5 heads do not divide"),
        ("layer_norm_epsilon", json!("small"), "not a number"),
    ];
    for (field, value, detail) in cases {
        let dir = copy_of(TIED, "config");
        edit_config(&dir.0, |map| {
            map.insert(field.to_owned(), value.clone());
        });
        let err = Gpt2Config::read(&dir.0).unwrap_err();
        assert_checkpoint_error(&err, field, &[detail]);
        assert_checkpoint_error(&failed_load(&dir.0, None), field, &[detail]);
    }
    // The other spelling of the tanh GELU is the same function.
    let dir = copy_of(TIED, "config");
    edit_config(&dir.0, |map| {
        map.insert("activation_function".into(), json!("gelu_pytorch_tanh"));
    });
    Gpt2Config::read(&dir.0).unwrap();
    // A missing shape field, and a file that is not JSON.
    edit_config(&dir.0, |map| {
        map.remove("n_embd");
    });
    assert_checkpoint_error(
        &Gpt2Config::read(&dir.0).unwrap_err(),
        "n_embd",
        &["missing"],
    );
    std::fs::write(dir.0.join(hf::CONFIG_FILE), b"{\"n_embd\": ").unwrap();
    assert_checkpoint_error(&Gpt2Config::read(&dir.0).unwrap_err(), "(file)", &["JSON"]);
}

#[test]
fn a_model_of_other_heads_is_refused() {
    let mut config = Gpt2Config::read(&data(TIED)).unwrap().gpt_config(0.0);
    config.heads = 2;
    let err = failed_load(&data(TIED), Some(config));
    assert_checkpoint_error(&err, "n_head", &["4 heads", "has 2"]);
}

#[test]
fn a_tensor_of_another_shape_is_an_error_naming_it_with_both_shapes() {
    let dir = copy_of(TIED, "shape");
    let path = dir.0.join(hf::WEIGHTS_FILE);
    edit_tensor(&path, "transformer.h.1.mlp.c_fc.weight", |fc| {
        fc.2 = vec![16, 32];
        fc.3.truncate(16 * 32 * 2);
    });
    let err = failed_load(&dir.0, None);
    assert_checkpoint_error(
        &err,
        "transformer.h.1.mlp.c_fc.weight",
        &["[16, 32]", "[16, 64]"],
    );
}

#[test]
fn a_non_finite_weight_is_an_error_naming_the_tensor_and_where_it_is() {
    let dir = copy_of(TIED, "non-finite");
    let path = dir.0.join(hf::WEIGHTS_FILE);
    // Stored [16, 64] in f16: a NaN at row 2, column 5, and an infinity further on.
    edit_tensor(&path, "transformer.h.1.mlp.c_fc.weight", |fc| {
        let (nan, inf) = (2 * 64 + 5, 7 * 64);
        fc.3[2 * nan..2 * nan + 2].copy_from_slice(&0x7E00u16.to_le_bytes());
        fc.3[2 * inf..2 * inf + 2].copy_from_slice(&0x7C00u16.to_le_bytes());
    });
    let err = failed_load(&dir.0, None);
    assert_checkpoint_error(
        &err,
        "transformer.h.1.mlp.c_fc.weight",
        &["NaN at [2, 5]", "2 non-finite values"],
    );
}

#[test]
fn a_missing_tensor_is_an_error_naming_it() {
    let dir = copy_of(TIED, "missing");
    let path = dir.0.join(hf::WEIGHTS_FILE);
    edit(&path, |all| {
        all.retain(|t| t.0 != "transformer.h.0.ln_2.bias")
    });
    // The epsilon is not applied either.
    edit_config(&dir.0, |map| {
        map.insert("layer_norm_epsilon".into(), serde_json::json!(1e-3));
    });
    let err = failed_load(&dir.0, None);
    assert_checkpoint_error(&err, "transformer.h.0.ln_2.bias", &["missing"]);

    // An untied model needs the head the tied file does not hold.
    let mut config = Gpt2Config::read(&data(TIED)).unwrap().gpt_config(0.0);
    config.tie_embeddings = false;
    let err = failed_load(&data(TIED), Some(config));
    assert_checkpoint_error(&err, "lm_head.weight", &["missing", "head.weight"]);
}

#[test]
fn a_tensor_the_model_has_no_place_for_is_an_error() {
    let dir = copy_of(TIED, "extra");
    let path = dir.0.join(hf::WEIGHTS_FILE);
    edit(&path, |all| {
        let extra = (
            "transformer.h.2.ln_1.weight".to_owned(),
            Dtype::F16,
            vec![16],
            vec![0; 32],
        );
        all.push(extra);
    });
    let err = failed_load(&dir.0, None);
    assert_checkpoint_error(&err, "transformer.h.2.ln_1.weight", &["no parameter"]);

    // The untied file's head has no place in a tied model.
    let mut config = Gpt2Config::read(&data(UNTIED)).unwrap().gpt_config(0.0);
    config.tie_embeddings = true;
    let err = failed_load(&data(UNTIED), Some(config));
    assert_checkpoint_error(&err, "lm_head.weight", &["differs"]);
}

#[test]
fn a_truncated_file_is_a_corrupt_checkpoint() {
    let dir = copy_of(TIED, "truncated");
    let path = dir.0.join(hf::WEIGHTS_FILE);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
    let err = failed_load(&dir.0, None);
    assert!(
        matches!(&err, Error::CorruptCheckpoint { path: p, .. } if *p == path),
        "{err}"
    );
}
