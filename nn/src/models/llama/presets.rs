//! The Llama family's published shapes (SmolLM2, Qwen2.5, Qwen3, Llama 3.1 and 3.2), each field
//! as its `config.json` has it.

use headroom_kernels::ops::rotary::Llama3Scaling;

use crate::models::decoder_config::GptConfig;
use crate::models::family::Family;
use crate::models::llama::options::LlamaOptions;
use crate::models::preset::Preset;

/// The numbers of a Llama-family preset, in `config.json`'s order.
struct Published {
    vocab: usize,
    width: usize,
    mlp_width: usize,
    layers: usize,
    /// Query heads, key/value heads and features per head.
    heads: (usize, usize, usize),
    context: usize,
    rope_theta: f64,
    norm_eps: f64,
    tied: bool,
}

/// Llama 3's rope scaling with `factor` (8 for Llama 3.1, 32 for 3.2).
fn llama3(factor: f64) -> Option<Llama3Scaling> {
    Some(Llama3Scaling {
        factor,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192,
    })
}

impl Published {
    /// The decoder of these numbers, with `scaling` and the Qwen options.
    fn gpt(self, scaling: Option<Llama3Scaling>, qkv_bias: bool, qk_norm: bool) -> GptConfig {
        let (heads, kv_heads, head_dim) = self.heads;
        GptConfig {
            vocab: self.vocab,
            context: self.context,
            width: self.width,
            heads,
            layers: self.layers,
            dropout: 0.0,
            tie_embeddings: self.tied,
            family: Family::Llama(LlamaOptions {
                kv_heads,
                head_dim,
                mlp_width: self.mlp_width,
                rope_theta: self.rope_theta,
                rope_scaling: scaling,
                norm_eps: self.norm_eps,
                qkv_bias,
                qk_norm,
            }),
        }
    }
}

/// SmolLM2 of these numbers: its vocabulary, 8192 positions, a tied head.
fn smollm2(
    width: usize,
    mlp_width: usize,
    layers: usize,
    heads: (usize, usize, usize),
    rope_theta: f64,
) -> GptConfig {
    let numbers = Published {
        vocab: 49152,
        width,
        mlp_width,
        layers,
        heads,
        context: 8192,
        rope_theta,
        norm_eps: 1e-5,
        tied: true,
    };
    numbers.gpt(None, false, false)
}

/// Qwen2.5 or Qwen3 of these numbers: its vocabulary, base 1e6, a tied head.
fn qwen(
    (width, mlp_width, layers): (usize, usize, usize),
    heads: (usize, usize, usize),
    context: usize,
    (qkv_bias, qk_norm): (bool, bool),
) -> GptConfig {
    let numbers = Published {
        vocab: 151_936,
        width,
        mlp_width,
        layers,
        heads,
        context,
        rope_theta: 1e6,
        norm_eps: 1e-6,
        tied: true,
    };
    numbers.gpt(None, qkv_bias, qk_norm)
}

/// Llama 3 of these numbers: its vocabulary, 131 072 positions, base 500 000, its scaling.
fn llama(
    (width, mlp_width, layers): (usize, usize, usize),
    heads: (usize, usize, usize),
    (tied, factor): (bool, f64),
) -> GptConfig {
    let numbers = Published {
        vocab: 128_256,
        width,
        mlp_width,
        layers,
        heads,
        context: 131_072,
        rope_theta: 500_000.0,
        norm_eps: 1e-5,
        tied,
    };
    numbers.gpt(llama3(factor), false, false)
}

/// The Llama family's presets.
pub(crate) const PRESETS: &[Preset] = &[
    Preset::new(
        "smollm2-135m",
        "HuggingFaceTB/SmolLM2-135M: 30 layers, width 576, 9 heads sharing 3 (135M)",
        || smollm2(576, 1536, 30, (9, 3, 64), 100_000.0),
    ),
    Preset::new(
        "smollm2-360m",
        "HuggingFaceTB/SmolLM2-360M: 32 layers, width 960, 15 heads sharing 5 (362M)",
        || smollm2(960, 2560, 32, (15, 5, 64), 100_000.0),
    ),
    Preset::new(
        "smollm2-1.7b",
        "HuggingFaceTB/SmolLM2-1.7B: 24 layers, width 2048, 32 heads (1.7B)",
        || smollm2(2048, 8192, 24, (32, 32, 64), 130_000.0),
    ),
    Preset::new(
        "qwen2.5-0.5b",
        "Qwen/Qwen2.5-0.5B: 24 layers, width 896, 14 heads sharing 2, q/k/v biases (494M)",
        || qwen((896, 4864, 24), (14, 2, 64), 32768, (true, false)),
    ),
    Preset::new(
        "qwen2.5-1.5b",
        "Qwen/Qwen2.5-1.5B: 28 layers, width 1536, 12 heads sharing 2, q/k/v biases (1.5B)",
        || qwen((1536, 8960, 28), (12, 2, 128), 131_072, (true, false)),
    ),
    Preset::new(
        "qwen3-0.6b",
        "Qwen/Qwen3-0.6B: 28 layers, width 1024, 16 heads of 128 sharing 8, query/key norms \
         (596M)",
        || qwen((1024, 3072, 28), (16, 8, 128), 40960, (false, true)),
    ),
    Preset::new(
        "llama-3.2-1b",
        "meta-llama/Llama-3.2-1B: 16 layers, width 2048, 32 heads sharing 8 (1.2B)",
        || llama((2048, 8192, 16), (32, 8, 64), (true, 32.0)),
    ),
    Preset::new(
        "llama-3.2-3b",
        "meta-llama/Llama-3.2-3B: 28 layers, width 3072, 24 heads sharing 8 (3.2B)",
        || llama((3072, 8192, 28), (24, 8, 128), (true, 32.0)),
    ),
    Preset::new(
        "llama-3.1-8b",
        "meta-llama/Llama-3.1-8B: 32 layers, width 4096, 32 heads sharing 8, untied (8.0B)",
        || llama((4096, 14336, 32), (32, 8, 128), (false, 8.0)),
    ),
    Preset::new(
        "llama-3.1-70b",
        "meta-llama/Llama-3.1-70B: 80 layers, width 8192, 64 heads sharing 8, untied (70.6B)",
        || llama((8192, 28672, 80), (64, 8, 128), (false, 8.0)),
    ),
];
