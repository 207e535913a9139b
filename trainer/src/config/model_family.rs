//! `model.family` and the Llama family's options: how a configuration names the parts of its
//! decoder, and the [`GptConfig`] it describes.

use headroom_nn::{Family, GptConfig, LlamaOptions};
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
        }
    }

    /// The GPT it describes for a vocabulary of `vocab` and windows of `window` tokens: its
    /// context is the window, or for the Llama family `max_positions` when that is longer.
    pub fn gpt_config(&self, vocab: usize, window: usize) -> GptConfig {
        let context = match self.family {
            ModelFamily::Gpt2 => window,
            ModelFamily::Llama => self.max_positions.map_or(window, |m| m.max(window)),
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
        }
    }

    /// The Llama family's settings given to a GPT-2, each a problem.
    pub(super) fn family_problems(&self, problems: &mut Problems) {
        if self.family == ModelFamily::Llama {
            return;
        }
        let set = [
            ("kv_heads", self.kv_heads.is_some()),
            ("head_dim", self.head_dim.is_some()),
            ("mlp_width", self.mlp_width.is_some()),
            ("rope_theta", self.rope_theta.is_some()),
            ("rope_scaling", self.rope_scaling.is_some()),
            ("max_positions", self.max_positions.is_some()),
            ("qkv_bias", self.qkv_bias),
            ("qk_norm", self.qk_norm),
        ];
        for (field, _) in set.iter().filter(|(_, set)| *set) {
            problems.add(format!(
                "model.{field}: a setting of the llama family, where model.family is gpt2"
            ));
        }
    }
}
