//! GPT-2's published shapes, and `gpt-mini`, a small GPT that trains on two CPU cores in
//! minutes.

use crate::models::decoder_config::GptConfig;
use crate::models::family::Family;
use crate::models::preset::Preset;

/// GPT-2's vocabulary: 50,000 merges, 256 bytes and the end-of-text token.
pub const GPT2_VOCAB: usize = 50257;

/// GPT-2 of `layers` blocks of `width` features in `heads` heads: its vocabulary, 1024
/// positions, a tied head.
fn gpt2(layers: usize, width: usize, heads: usize) -> GptConfig {
    GptConfig {
        vocab: GPT2_VOCAB,
        context: 1024,
        width,
        heads,
        layers,
        dropout: 0.0,
        tie_embeddings: true,
        family: Family::Gpt2,
    }
}

/// GPT-2's presets, smallest first.
pub(crate) const PRESETS: &[Preset] = &[
    Preset::new(
        "gpt2",
        "GPT-2 small: 12 layers, width 768, 12 heads (124M parameters)",
        || gpt2(12, 768, 12),
    ),
    Preset::new(
        "gpt2-medium",
        "GPT-2 medium: 24 layers, width 1024, 16 heads (350M)",
        || gpt2(24, 1024, 16),
    ),
    Preset::new(
        "gpt2-large",
        "GPT-2 large: 36 layers, width 1280, 20 heads (774M)",
        || gpt2(36, 1280, 20),
    ),
    Preset::new(
        "gpt2-xl",
        "GPT-2 XL: 48 layers, width 1600, 25 heads (1.5B)",
        || gpt2(48, 1600, 25),
    ),
    Preset::new(
        "gpt-mini",
        "A small GPT for text on a CPU: 4 layers, width 256, 4 heads, context 256, and the \
         vocabulary of `headroom tokenizer train`'s default (8192): 5.3M parameters",
        || GptConfig {
            vocab: 8192,
            context: 256,
            ..gpt2(4, 256, 4)
        },
    ),
];
