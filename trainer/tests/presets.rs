//! Every preset has the exact shape of the model it names: the Llama family's against copies of
//! their published `config.json` files (`nn/tests/data/published/`), read by the same reader
//! as `--init-from`.

use std::path::Path;

use headroom_kernels::{DType, Device, DeviceConfig};
use headroom_nn::hf::LlamaConfig;
use headroom_nn::{Family, Gpt, Initializer, Module};
use headroom_trainer::config::{ALL_PRESETS, Preset};

fn published(preset: Preset) -> LlamaConfig {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../nn/tests/data/published")
        .join(format!("{}.json", preset.name()));
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    LlamaConfig::from_json(&path, &value).unwrap()
}

#[test]
fn every_llama_family_preset_is_its_published_configuration_field_by_field() {
    let llama: Vec<Preset> = ALL_PRESETS
        .into_iter()
        .filter(|p| !p.learned_positions())
        .collect();
    assert_eq!(llama.len(), 9);
    for preset in llama {
        assert_eq!(
            preset.shape(),
            published(preset).gpt_config(0.0),
            "{}",
            preset.name()
        );
    }
}

#[test]
fn the_presets_have_their_published_parameter_counts() {
    // The counts the model cards give (in millions, rounded as they round them).
    let meta = Device::meta(DeviceConfig::new(64 << 30)).unwrap();
    for (preset, millions) in [
        (Preset::Smollm2_135m, 134.5),
        (Preset::Qwen2_5_0_5b, 494.0),
        (Preset::Qwen3_0_6b, 596.0),
        (Preset::Llama3_2_1b, 1235.8),
        (Preset::Llama3_1_8b, 8030.3),
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
