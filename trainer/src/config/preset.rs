//! GPT-2's published shapes, by the names Hugging Face gives them, and `gpt-mini`, a small one
//! that trains on two CPU cores in minutes. A preset sets a model's fields; anything a
//! configuration file or a flag sets wins over it (preset < file < flag).

use serde::{Deserialize, Serialize};

/// A published model shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// GPT-2 small: 12 layers, width 768, 12 heads (124M parameters).
    Gpt2,
    /// GPT-2 medium: 24 layers, width 1024, 16 heads (350M).
    Gpt2Medium,
    /// GPT-2 large: 36 layers, width 1280, 20 heads (774M).
    Gpt2Large,
    /// GPT-2 XL: 48 layers, width 1600, 25 heads (1.5B).
    Gpt2Xl,
    /// A small GPT for text on a CPU: 4 layers, width 256, 4 heads, context 256, and the
    /// vocabulary of `headroom tokenizer train`'s default (8192): 5.3M parameters.
    GptMini,
}

/// What a preset fixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PresetShape {
    /// Transformer blocks.
    pub layers: usize,
    /// Features per position.
    pub width: usize,
    /// Attention heads.
    pub heads: usize,
    /// Positions.
    pub context: usize,
    /// Tokens (GPT-2's byte-level BPE).
    pub vocab: usize,
}

/// GPT-2's vocabulary: 50,000 merges, 256 bytes and the end-of-text token.
pub const GPT2_VOCAB: usize = 50257;

impl Preset {
    /// The shape this preset names; each ties its head to its token embedding.
    pub fn shape(self) -> PresetShape {
        let gpt2 = |layers, width, heads| PresetShape {
            layers,
            width,
            heads,
            context: 1024,
            vocab: GPT2_VOCAB,
        };
        match self {
            Preset::Gpt2 => gpt2(12, 768, 12),
            Preset::Gpt2Medium => gpt2(24, 1024, 16),
            Preset::Gpt2Large => gpt2(36, 1280, 20),
            Preset::Gpt2Xl => gpt2(48, 1600, 25),
            Preset::GptMini => PresetShape {
                layers: 4,
                width: 256,
                heads: 4,
                context: 256,
                vocab: 8192,
            },
        }
    }

    /// Its name, as configurations and flags write it.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Gpt2 => "gpt2",
            Preset::Gpt2Medium => "gpt2-medium",
            Preset::Gpt2Large => "gpt2-large",
            Preset::Gpt2Xl => "gpt2-xl",
            Preset::GptMini => "gpt-mini",
        }
    }
}
