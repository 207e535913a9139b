//! Published model shapes by the names Hugging Face gives them, each family's in its folder,
//! gathered here: what a configuration's `model.preset` names.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::models::decoder_config::GptConfig;
use crate::models::{gemma3, gpt2, llama};

/// A published model shape: its name, a line about it, and the decoder it describes.
#[derive(Clone, Copy)]
pub struct Preset {
    name: &'static str,
    about: &'static str,
    shape: fn() -> GptConfig,
}

impl Preset {
    /// A preset of `name`, described by `about`, whose decoder `shape` gives.
    pub(crate) const fn new(
        name: &'static str,
        about: &'static str,
        shape: fn() -> GptConfig,
    ) -> Self {
        Self { name, about, shape }
    }

    /// Every preset, family by family.
    pub fn all() -> impl Iterator<Item = Preset> {
        let families = [gpt2::PRESETS, llama::PRESETS, gemma3::PRESETS];
        families.into_iter().flatten().copied()
    }

    /// The preset called `name`, if there is one.
    pub fn named(name: &str) -> Option<Preset> {
        Self::all().find(|preset| preset.name == name)
    }

    /// Its name, as configurations and flags write it.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// A line about it: the published model, its shape and its size.
    pub fn about(self) -> &'static str {
        self.about
    }

    /// The decoder it names: vocabulary, context (`n_positions` or `max_position_embeddings`),
    /// shape, tied head and family, without dropout.
    pub fn shape(self) -> GptConfig {
        (self.shape)()
    }

    /// True where positions are a learned table of `context` rows (GPT-2's presets): their
    /// context is also the default window. A rotary preset's context is only the longest it
    /// was trained for.
    pub fn learned_positions(self) -> bool {
        self.shape().family.learned_positions()
    }
}

impl PartialEq for Preset {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Preset {}

impl std::fmt::Debug for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Preset({})", self.name)
    }
}

impl std::fmt::Display for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl Serialize for Preset {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name)
    }
}

impl<'de> Deserialize<'de> for Preset {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Preset::named(&name).ok_or_else(|| {
            let names: Vec<&str> = Preset::all().map(Preset::name).collect();
            serde::de::Error::custom(format!(
                "unknown preset `{name}`, expected one of {}",
                names.join(", ")
            ))
        })
    }
}
