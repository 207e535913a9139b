//! PEFT adapter directories: adapters made by PEFT itself (`scripts/hf/make_tiny_lora.py`) over
//! the tiny transformers models give PEFT's logits, an export holds the same tensors under the
//! same names, and a merged model gives the adapted one's logits.

mod common;

use std::path::{Path, PathBuf};

use common::{TempDir, device};
use headroom_autograd::Tensor;
use headroom_kernels::{DType, Device};
use headroom_nn::hf::{self, Gpt2Config, LlamaConfig, PeftAdapter};
use headroom_nn::lora::{self, LoraTargets};
use headroom_nn::{Error, Gpt, Initializer, Module};
use safetensors::SafeTensors;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The base of `adapter` (its `base_model_name_or_path`), loaded in f32.
fn base(device: &Device, adapter: &str) -> Gpt {
    let dir = data(adapter);
    let base = PeftAdapter::read(&dir).unwrap().base_dir(&dir).unwrap();
    let init = &mut Initializer::new(device, DType::F32, 7);
    let mut gpt = if base.ends_with("tiny-gpt2") {
        let config = Gpt2Config::read(&base).unwrap().gpt_config(0.0);
        let mut gpt = Gpt::new(init, config).unwrap();
        hf::load_gpt2(&base, &mut gpt).unwrap();
        gpt
    } else {
        let config = LlamaConfig::read(&base).unwrap().gpt_config(0.0);
        let mut gpt = Gpt::new(init, config).unwrap();
        hf::load_llama(&base, &mut gpt).unwrap();
        gpt
    };
    // PEFT's logits are evaluation's: no adapter dropout.
    gpt.set_training(false);
    gpt
}

/// PEFT's ids (`[2, 5]`) and logits for `adapter`.
fn expected(adapter: &str) -> (Vec<u32>, Vec<f64>) {
    let text = std::fs::read(data(adapter).join("expected.json")).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&text).unwrap();
    let ids = json["ids"].as_array().unwrap().iter();
    let ids = ids
        .flat_map(|row| row.as_array().unwrap().clone())
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let logits = json["logits"].as_array().unwrap();
    (ids, logits.iter().map(|v| v.as_f64().unwrap()).collect())
}

fn logits(gpt: &Gpt, ids: &[u32]) -> Vec<f64> {
    let device = gpt.tok_emb.weight.device();
    let ids = Tensor::from_host(device, [2, ids.len() / 2], ids).unwrap();
    gpt.forward(&ids).unwrap().to_f64().unwrap()
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

const ADAPTERS: [&str; 3] = ["lora-llama3", "lora-llama3-rslora", "lora-gpt2"];

#[test]
fn peft_adapters_give_peft_logits() {
    let device = device();
    for name in ADAPTERS {
        let mut gpt = base(&device, name);
        let (ids, want) = expected(name);
        let plain = logits(&gpt, &ids);
        let attached = hf::load_peft(&data(name), &mut gpt).unwrap();
        let got = logits(&gpt, &ids);
        let largest = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let diff = max_abs_diff(&got, &want);
        assert!(
            diff < 1e-5 * largest.max(1.0),
            "{name}: logits off by {diff}"
        );
        assert!(
            max_abs_diff(&plain, &want) > 1e-2,
            "{name}: the adapters changed nothing"
        );
        assert_eq!(gpt.parameter_count(), attached.trainable);
    }
}

#[test]
fn an_export_holds_peft_names_and_values_and_reads_back() {
    let device = device();
    for name in ADAPTERS {
        let mut gpt = base(&device, name);
        hf::load_peft(&data(name), &mut gpt).unwrap();
        let adapter = PeftAdapter::read(&data(name)).unwrap();
        let out = TempDir::new("peft-export");
        hf::export_peft(
            &gpt,
            &adapter.lora,
            out.0.as_path(),
            adapter.base.as_deref(),
        )
        .unwrap();
        // scripts/hf/check_peft_export.py checks a kept export with PEFT itself.
        if let Ok(keep) = std::env::var("HEADROOM_KEEP_PEFT_EXPORT") {
            let dir = Path::new(&keep).join(name);
            hf::export_peft(&gpt, &adapter.lora, &dir, adapter.base.as_deref()).unwrap();
        }
        let theirs = std::fs::read(data(name).join(hf::ADAPTER_WEIGHTS)).unwrap();
        let ours = std::fs::read(out.0.as_path().join(hf::ADAPTER_WEIGHTS)).unwrap();
        let (theirs, ours) = (
            SafeTensors::deserialize(&theirs).unwrap(),
            SafeTensors::deserialize(&ours).unwrap(),
        );
        let mut names = ours.names();
        names.sort();
        let mut expected = theirs.names();
        expected.sort();
        assert_eq!(names, expected, "{name}");
        for key in names {
            let (a, b) = (ours.tensor(key).unwrap(), theirs.tensor(key).unwrap());
            assert_eq!((a.shape(), a.data()), (b.shape(), b.data()), "{name} {key}");
        }
        let read = PeftAdapter::read(out.0.as_path()).unwrap();
        assert_eq!(read.lora.rank, adapter.lora.rank);
        assert_eq!(read.lora.scale(), adapter.lora.scale());
        assert_eq!(read.base, adapter.base);
    }
}

#[test]
fn a_merged_model_gives_the_adapted_logits() {
    let device = device();
    for name in ADAPTERS {
        let mut gpt = base(&device, name);
        hf::load_peft(&data(name), &mut gpt).unwrap();
        let (ids, _) = expected(name);
        let adapted = logits(&gpt, &ids);
        let modules = gpt.blocks.len() * if name == "lora-llama3-rslora" { 2 } else { 4 };
        assert!(lora::merge(&mut gpt).unwrap() >= modules / 2);
        assert_eq!(gpt.frozen_count(), 0);
        assert!(
            gpt.named_parameters()
                .iter()
                .all(|(n, _)| !lora::is_adapter_name(n))
        );
        let diff = max_abs_diff(&logits(&gpt, &ids), &adapted);
        assert!(diff < 1e-4, "{name}: merged logits off by {diff}");
    }
}

/// A copy of `adapter`'s directory with `edit` applied to its configuration and `keep`
/// deciding which tensors stay.
fn edited(
    adapter: &str,
    edit: impl Fn(&mut serde_json::Value),
    keep: impl Fn(&str) -> bool,
) -> TempDir {
    let out = TempDir::created("peft-edited");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data(adapter).join(hf::ADAPTER_CONFIG)).unwrap())
            .unwrap();
    edit(&mut config);
    std::fs::write(out.0.as_path().join(hf::ADAPTER_CONFIG), config.to_string()).unwrap();
    let bytes = std::fs::read(data(adapter).join(hf::ADAPTER_WEIGHTS)).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<_> = file
        .tensors()
        .into_iter()
        .filter(|(k, _)| keep(k))
        .collect();
    let bytes = safetensors::tensor::serialize(kept, None).unwrap();
    std::fs::write(out.0.as_path().join(hf::ADAPTER_WEIGHTS), bytes).unwrap();
    out
}

#[test]
fn adapters_headroom_cannot_follow_are_refused_by_name() {
    let device = device();
    let name = "lora-llama3-rslora";
    let cases: Vec<(TempDir, &str)> = vec![
        (
            edited(name, |c| c["use_dora"] = true.into(), |_| true),
            "use_dora",
        ),
        (edited(name, |c| c["bias"] = "all".into(), |_| true), "bias"),
        (
            edited(name, |c| c["target_modules"] = ".*proj".into(), |_| true),
            "target_modules",
        ),
        (
            edited(
                name,
                |_| {},
                |k| !k.contains("layers.1.mlp.down_proj.lora_B"),
            ),
            "layers.1.mlp.down_proj.lora_B",
        ),
        (
            edited(
                name,
                |c| c["target_modules"] = serde_json::json!(["v_proj"]),
                |_| true,
            ),
            "no module for",
        ),
    ];
    for (dir, named) in cases {
        let mut gpt = base(&device, name);
        let err = hf::load_peft(dir.0.as_path(), &mut gpt).unwrap_err();
        assert!(
            matches!(err, Error::Checkpoint { .. } | Error::Config { .. }),
            "{err}"
        );
        assert!(err.to_string().contains(named), "{named} in {err}");
        // Nothing changed.
        assert_eq!(gpt.frozen_count(), 0);
        assert!(
            gpt.named_parameters()
                .iter()
                .all(|(n, _)| !lora::is_adapter_name(n))
        );
    }
    let _ = LoraTargets::default();
}
