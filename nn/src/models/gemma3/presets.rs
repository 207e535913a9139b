//! Gemma 3's published text models, each field as its `config.json` has it.

use crate::models::decoder_config::GptConfig;
use crate::models::family::Family;
use crate::models::gemma3::options::Gemma3Options;
use crate::models::preset::Preset;

/// Gemma 3 of `layers` blocks of `width` features and an MLP of `mlp_width`: its 262 144-token
/// vocabulary tied to the head, 32 768 positions, 4 query heads sharing one of 256 features,
/// a window of 512 on five layers of six.
fn gemma3(width: usize, mlp_width: usize, layers: usize) -> GptConfig {
    GptConfig {
        vocab: 262_144,
        context: 32_768,
        width,
        heads: 4,
        layers,
        dropout: 0.0,
        tie_embeddings: true,
        family: Family::Gemma3(Gemma3Options {
            kv_heads: 1,
            head_dim: 256,
            mlp_width,
            rope_theta: 1_000_000.0,
            rope_local_theta: 10_000.0,
            norm_eps: 1e-6,
            query_pre_attn_scalar: 256,
            sliding_window: 512,
            sliding_window_pattern: 6,
        }),
    }
}

/// Gemma 3's presets.
pub(crate) const PRESETS: &[Preset] = &[
    Preset::new(
        "gemma-3-270m",
        "google/gemma-3-270m: 18 layers, width 640, 4 heads sharing 1 (268M)",
        || gemma3(640, 2048, 18),
    ),
    Preset::new(
        "gemma-3-1b",
        "google/gemma-3-1b-pt: 26 layers, width 1152, 4 heads sharing 1 (1.0B)",
        || gemma3(1152, 6912, 26),
    ),
];
