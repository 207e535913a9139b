//! Every preset has the exact shape of the model it names: the Llama family's and Gemma 3's
//! against copies of their published `config.json` files (`nn/tests/data/published/`), read by
//! the same readers as `--init-from`.

use std::path::Path;

use headroom_kernels::{DType, Device, DeviceConfig};
use headroom_nn::hf::{Gemma3Config, LlamaConfig};
use headroom_nn::{Family, Gpt, GptConfig, Initializer, Module};
use headroom_trainer::config::Preset;

/// The decoder the published `config.json` of `preset` describes.
fn published(preset: Preset) -> GptConfig {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../nn/tests/data/published")
        .join(format!("{}.json", preset.name()));
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    match preset.shape().family {
        Family::Gemma3(_) => Gemma3Config::from_json(&path, &value)
            .unwrap()
            .gpt_config(0.0),
        _ => LlamaConfig::from_json(&path, &value)
            .unwrap()
            .gpt_config(0.0),
    }
}

#[test]
fn every_rotary_preset_is_its_published_configuration_field_by_field() {
    let rotary: Vec<Preset> = Preset::all().filter(|p| !p.learned_positions()).collect();
    assert_eq!(rotary.len(), 12);
    for preset in rotary {
        assert_eq!(preset.shape(), published(preset), "{}", preset.name());
    }
}

#[test]
fn gemma_3_presets_have_transformers_parameter_counts() {
    // transformers' Gemma3ForCausalLM of the published files, built on the meta device.
    let meta = Device::meta(DeviceConfig::new(64 << 30)).unwrap();
    for (name, count) in [("gemma-3-270m", 268_098_176), ("gemma-3-1b", 999_885_952)] {
        let preset = Preset::named(name).unwrap();
        let gpt = Gpt::new(&mut Initializer::new(&meta, DType::BF16, 0), preset.shape()).unwrap();
        assert_eq!(gpt.parameter_count(), count, "{name}");
    }
}

#[test]
fn the_presets_have_their_published_parameter_counts() {
    // The counts the model cards give (in millions, rounded as they round them).
    let meta = Device::meta(DeviceConfig::new(256 << 30)).unwrap();
    for (preset, millions) in [
        (Preset::named("smollm2-135m").unwrap(), 134.5),
        (Preset::named("qwen2.5-0.5b").unwrap(), 494.0),
        (Preset::named("qwen3-0.6b").unwrap(), 596.0),
        (Preset::named("llama-3.2-1b").unwrap(), 1235.8),
        (Preset::named("llama-3.1-8b").unwrap(), 8030.3),
        (Preset::named("llama-3.1-70b").unwrap(), 70553.7),
    ] {
        let gpt = Gpt::new(&mut Initializer::new(&meta, DType::BF16, 0), preset.shape()).unwrap();
        let count = gpt.parameter_count() as f64 / 1e6;
        assert!(
            (count - millions).abs() < 0.5,
            "{}: {count:.1}M parameters, where {millions}M are published",
            preset.name()
        );
        assert!(matches!(gpt.config().family, Family::Llama(_)));
    }
}
