//! Published model shapes, by the names Hugging Face gives them: GPT-2's four, the Llama
//! family's (SmolLM2, Qwen2.5, Qwen3, Llama 3.1 and 3.2, each field as its `config.json` has
//! it), and `gpt-mini`, a small GPT that trains on two CPU cores in minutes. A preset sets a
//! model's fields; anything a configuration file or a flag sets wins over it (preset < file <
//! flag).

use headroom_kernels::ops::rotary::Llama3Scaling;
use headroom_nn::{Family, GptConfig, LlamaOptions};
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
    /// HuggingFaceTB/SmolLM2-135M: 30 layers, width 576, 9 heads sharing 3 (135M).
    #[serde(rename = "smollm2-135m")]
    Smollm2_135m,
    /// HuggingFaceTB/SmolLM2-360M: 32 layers, width 960, 15 heads sharing 5 (362M).
    #[serde(rename = "smollm2-360m")]
    Smollm2_360m,
    /// HuggingFaceTB/SmolLM2-1.7B: 24 layers, width 2048, 32 heads (1.7B).
    #[serde(rename = "smollm2-1.7b")]
    Smollm2_1_7b,
    /// Qwen/Qwen2.5-0.5B: 24 layers, width 896, 14 heads sharing 2, q/k/v biases (494M).
    #[serde(rename = "qwen2.5-0.5b")]
    Qwen2_5_0_5b,
    /// Qwen/Qwen2.5-1.5B: 28 layers, width 1536, 12 heads sharing 2, q/k/v biases (1.5B).
    #[serde(rename = "qwen2.5-1.5b")]
    Qwen2_5_1_5b,
    /// Qwen/Qwen3-0.6B: 28 layers, width 1024, 16 heads of 128 sharing 8, query/key norms
    /// (596M).
    #[serde(rename = "qwen3-0.6b")]
    Qwen3_0_6b,
    /// meta-llama/Llama-3.2-1B: 16 layers, width 2048, 32 heads sharing 8 (1.2B).
    #[serde(rename = "llama-3.2-1b")]
    Llama3_2_1b,
    /// meta-llama/Llama-3.2-3B: 28 layers, width 3072, 24 heads sharing 8 (3.2B).
    #[serde(rename = "llama-3.2-3b")]
    Llama3_2_3b,
    /// meta-llama/Llama-3.1-8B: 32 layers, width 4096, 32 heads sharing 8, untied (8.0B).
    #[serde(rename = "llama-3.1-8b")]
    Llama3_1_8b,
}

/// GPT-2's vocabulary: 50,000 merges, 256 bytes and the end-of-text token.
pub const GPT2_VOCAB: usize = 50257;

/// The numbers of a Llama-family preset, in `config.json`'s order.
struct Published {
    vocab: usize,
    width: usize,
    mlp_width: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
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
        GptConfig {
            vocab: self.vocab,
            context: self.context,
            width: self.width,
            heads: self.heads,
            layers: self.layers,
            dropout: 0.0,
            tie_embeddings: self.tied,
            family: Family::Llama(LlamaOptions {
                kv_heads: self.kv_heads,
                head_dim: self.head_dim,
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

/// Every preset, in order.
pub const ALL_PRESETS: [Preset; 14] = [
    Preset::Gpt2,
    Preset::Gpt2Medium,
    Preset::Gpt2Large,
    Preset::Gpt2Xl,
    Preset::GptMini,
    Preset::Smollm2_135m,
    Preset::Smollm2_360m,
    Preset::Smollm2_1_7b,
    Preset::Qwen2_5_0_5b,
    Preset::Qwen2_5_1_5b,
    Preset::Qwen3_0_6b,
    Preset::Llama3_2_1b,
    Preset::Llama3_2_3b,
    Preset::Llama3_1_8b,
];

impl Preset {
    /// The decoder this preset names: its vocabulary, context (`n_positions` or
    /// `max_position_embeddings`), shape, tied head and family, without dropout.
    pub fn shape(self) -> GptConfig {
        let gpt2 = |layers, width, heads| GptConfig {
            vocab: GPT2_VOCAB,
            context: 1024,
            width,
            heads,
            layers,
            dropout: 0.0,
            tie_embeddings: true,
            family: Family::Gpt2,
        };
        #[rustfmt::skip]
        let published = |vocab, width, mlp_width, layers, (heads, kv_heads, head_dim),
                         context, rope_theta, norm_eps, tied| Published {
            vocab, width, mlp_width, layers, heads, kv_heads, head_dim, context, rope_theta,
            norm_eps, tied,
        };
        let smollm2 = |width, mlp, layers, heads, theta| {
            published(49152, width, mlp, layers, heads, 8192, theta, 1e-5, true)
        };
        let qwen = |width, mlp, layers, heads, context| {
            published(151_936, width, mlp, layers, heads, context, 1e6, 1e-6, true)
        };
        let llama = |width, layers, heads, tied| {
            let mlp = if width == 4096 { 14336 } else { 8192 };
            published(
                128_256, width, mlp, layers, heads, 131_072, 500_000.0, 1e-5, tied,
            )
        };
        match self {
            Preset::Gpt2 => gpt2(12, 768, 12),
            Preset::Gpt2Medium => gpt2(24, 1024, 16),
            Preset::Gpt2Large => gpt2(36, 1280, 20),
            Preset::Gpt2Xl => gpt2(48, 1600, 25),
            Preset::GptMini => GptConfig {
                vocab: 8192,
                context: 256,
                ..gpt2(4, 256, 4)
            },
            Preset::Smollm2_135m => {
                smollm2(576, 1536, 30, (9, 3, 64), 100_000.0).gpt(None, false, false)
            }
            Preset::Smollm2_360m => {
                smollm2(960, 2560, 32, (15, 5, 64), 100_000.0).gpt(None, false, false)
            }
            Preset::Smollm2_1_7b => {
                smollm2(2048, 8192, 24, (32, 32, 64), 130_000.0).gpt(None, false, false)
            }
            Preset::Qwen2_5_0_5b => qwen(896, 4864, 24, (14, 2, 64), 32768).gpt(None, true, false),
            Preset::Qwen2_5_1_5b => {
                qwen(1536, 8960, 28, (12, 2, 128), 131_072).gpt(None, true, false)
            }
            Preset::Qwen3_0_6b => qwen(1024, 3072, 28, (16, 8, 128), 40960).gpt(None, false, true),
            Preset::Llama3_2_1b => {
                llama(2048, 16, (32, 8, 64), true).gpt(llama3(32.0), false, false)
            }
            Preset::Llama3_2_3b => {
                llama(3072, 28, (24, 8, 128), true).gpt(llama3(32.0), false, false)
            }
            Preset::Llama3_1_8b => {
                llama(4096, 32, (32, 8, 128), false).gpt(llama3(8.0), false, false)
            }
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
            Preset::Smollm2_135m => "smollm2-135m",
            Preset::Smollm2_360m => "smollm2-360m",
            Preset::Smollm2_1_7b => "smollm2-1.7b",
            Preset::Qwen2_5_0_5b => "qwen2.5-0.5b",
            Preset::Qwen2_5_1_5b => "qwen2.5-1.5b",
            Preset::Qwen3_0_6b => "qwen3-0.6b",
            Preset::Llama3_2_1b => "llama-3.2-1b",
            Preset::Llama3_2_3b => "llama-3.2-3b",
            Preset::Llama3_1_8b => "llama-3.1-8b",
        }
    }

    /// True for GPT-2's presets, whose positions are a learned table of `context` rows: their
    /// context is also the default window. A rotary preset's context is only the longest it
    /// was trained for; its window comes from the data.
    pub fn learned_positions(self) -> bool {
        self.shape().family == Family::Gpt2
    }
}
