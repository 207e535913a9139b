//! `model.family` and its options: how a configuration names the parts of its decoder, and the
//! [`GptConfig`] it describes.

use headroom_nn::{Family, Gemma3Options, GptConfig, LlamaOptions};
use serde::{Deserialize, Serialize};

use super::{ModelConfig, Problems};

/// The family of a GPT's parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelFamily {
    /// GPT-2: learned positions, LayerNorm, a GELU MLP.
    #[default]
    Gpt2,
    /// Llama, Qwen, SmolLM and Mistral: rotary positions, RMSNorm, a SwiGLU MLP, grouped
    /// key/value heads.
    Llama,
    /// Gemma 3: Llama's parts with a GeGLU MLP, norms before and after each sublayer and
    /// sliding-window attention on most layers.
    Gemma3,
}

impl ModelFamily {
    /// Its name in a configuration.
    pub fn name(self) -> &'static str {
        match self {
            ModelFamily::Gpt2 => "gpt2",
            ModelFamily::Llama => "llama",
            ModelFamily::Gemma3 => "gemma3",
        }
    }
}

impl ModelConfig {
    /// The parts its family gives a GPT: the Llama options from the fields set, the rest at
    /// [`LlamaOptions::for_width`]'s defaults (`norm_eps` 1e-5).
    pub fn family_parts(&self) -> Family {
        match self.family {
            ModelFamily::Gpt2 => Family::Gpt2,
            ModelFamily::Llama => {
                let base = LlamaOptions::for_width(self.width, self.heads);
                Family::Llama(LlamaOptions {
                    kv_heads: self.kv_heads.unwrap_or(base.kv_heads),
                    head_dim: self.head_dim.unwrap_or(base.head_dim),
                    mlp_width: self.mlp_width.unwrap_or(base.mlp_width),
                    rope_theta: self.rope_theta.unwrap_or(base.rope_theta),
                    rope_scaling: self.rope_scaling,
                    norm_eps: self.norm_eps.unwrap_or(base.norm_eps),
                    qkv_bias: self.qkv_bias,
                    qk_norm: self.qk_norm,
                })
            }
            ModelFamily::Gemma3 => {
                let base = Gemma3Options::for_width(self.width, self.heads);
                Family::Gemma3(Gemma3Options {
                    kv_heads: self.kv_heads.unwrap_or(base.kv_heads),
                    head_dim: self.head_dim.unwrap_or(base.head_dim),
                    mlp_width: self.mlp_width.unwrap_or(base.mlp_width),
                    rope_theta: self.rope_theta.unwrap_or(base.rope_theta),
                    rope_local_theta: self.rope_local_theta.unwrap_or(base.rope_local_theta),
                    norm_eps: self.norm_eps.unwrap_or(base.norm_eps),
                    query_pre_attn_scalar: self
                        .query_pre_attn_scalar
                        .unwrap_or(base.query_pre_attn_scalar),
                    sliding_window: self.sliding_window.unwrap_or(base.sliding_window),
                    sliding_window_pattern: self
                        .sliding_window_pattern
                        .unwrap_or(base.sliding_window_pattern),
                })
            }
        }
    }

    /// The GPT it describes for a vocabulary of `vocab` and windows of `window` tokens: its
    /// context is the window, or for the Llama family `max_positions` when that is longer.
    pub fn gpt_config(&self, vocab: usize, window: usize) -> GptConfig {
        let context = match self.family {
            ModelFamily::Gpt2 => window,
            ModelFamily::Llama | ModelFamily::Gemma3 => {
                self.max_positions.map_or(window, |m| m.max(window))
            }
        };
        GptConfig {
            vocab,
            context,
            width: self.width,
            heads: self.heads,
            layers: self.layers,
            dropout: self.dropout,
            tie_embeddings: self.tie_embeddings,
            family: self.family_parts(),
        }
    }

    /// Sets every shape field, the family and its options to those of `shape` (a preset's or
    /// a pretrained model's; for the Llama family its context is `max_positions`); the
    /// vocabulary and the window stay as they are.
    pub fn take_shape(&mut self, shape: &GptConfig) {
        self.width = shape.width;
        self.heads = shape.heads;
        self.layers = shape.layers;
        self.tie_embeddings = shape.tie_embeddings;
        match shape.family {
            Family::Gpt2 => self.family = ModelFamily::Gpt2,
            Family::Llama(o) => {
                self.family = ModelFamily::Llama;
                self.kv_heads = Some(o.kv_heads);
                self.head_dim = Some(o.head_dim);
                self.mlp_width = Some(o.mlp_width);
                self.rope_theta = Some(o.rope_theta);
                self.rope_scaling = o.rope_scaling;
                self.max_positions = Some(shape.context);
                self.norm_eps = Some(o.norm_eps);
                self.qkv_bias = o.qkv_bias;
                self.qk_norm = o.qk_norm;
            }
            Family::Gemma3(o) => {
                self.family = ModelFamily::Gemma3;
                self.kv_heads = Some(o.kv_heads);
                self.head_dim = Some(o.head_dim);
                self.mlp_width = Some(o.mlp_width);
                self.rope_theta = Some(o.rope_theta);
                self.rope_local_theta = Some(o.rope_local_theta);
                self.max_positions = Some(shape.context);
                self.norm_eps = Some(o.norm_eps);
                self.query_pre_attn_scalar = Some(o.query_pre_attn_scalar);
                self.sliding_window = Some(o.sliding_window);
                self.sliding_window_pattern = Some(o.sliding_window_pattern);
            }
        }
    }

    /// Each setting of another family than `model.family`, a problem.
    pub(super) fn family_problems(&self, problems: &mut Problems) {
        use ModelFamily::{Gemma3, Llama};
        let set = [
            (
                "kv_heads",
                self.kv_heads.is_some(),
                [Llama, Gemma3].as_slice(),
            ),
            ("head_dim", self.head_dim.is_some(), &[Llama, Gemma3]),
            ("mlp_width", self.mlp_width.is_some(), &[Llama, Gemma3]),
            ("rope_theta", self.rope_theta.is_some(), &[Llama, Gemma3]),
            (
                "max_positions",
                self.max_positions.is_some(),
                &[Llama, Gemma3],
            ),
            ("rope_scaling", self.rope_scaling.is_some(), &[Llama]),
            ("qkv_bias", self.qkv_bias, &[Llama]),
            ("qk_norm", self.qk_norm, &[Llama]),
            (
                "rope_local_theta",
                self.rope_local_theta.is_some(),
                &[Gemma3],
            ),
            (
                "query_pre_attn_scalar",
                self.query_pre_attn_scalar.is_some(),
                &[Gemma3],
            ),
            ("sliding_window", self.sliding_window.is_some(), &[Gemma3]),
            (
                "sliding_window_pattern",
                self.sliding_window_pattern.is_some(),
                &[Gemma3],
            ),
        ];
        for (field, _, families) in set
            .iter()
            .filter(|(_, set, families)| *set && !families.contains(&self.family))
        {
            let names: Vec<&str> = families.iter().map(|f| f.name()).collect();
            let family = match names.len() {
                1 => "family",
                _ => "families",
            };
            problems.add(format!(
                "model.{field}: a setting of the {} {family}, where model.family is {}",
                names.join(" and "),
                self.family.name()
            ));
        }
    }
}
