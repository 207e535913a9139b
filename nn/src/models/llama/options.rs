//! The options of the Llama family, named after the `config.json` fields they come from.

use headroom_kernels::ops::rotary::{Llama3Scaling, inv_freq};

use crate::layers::attention::{GroupedAttention, HeadNorm};

/// The options of a Llama-family decoder, named after the `config.json` fields they come from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LlamaOptions {
    /// Key/value heads (`num_key_value_heads`): each is shared by `heads / kv_heads` query
    /// heads (grouped-query attention; 1 is multi-query, `heads` multi-head). Divides `heads`.
    pub kv_heads: usize,
    /// Features per head (`head_dim`), even; not always `width / heads` (Qwen3).
    pub head_dim: usize,
    /// The MLP's inner width (`intermediate_size`).
    pub mlp_width: usize,
    /// The rotary base (`rope_theta`).
    pub rope_theta: f64,
    /// Llama 3's rescaling of the rotary frequencies (`rope_scaling` of `rope_type` llama3).
    pub rope_scaling: Option<Llama3Scaling>,
    /// Added to the mean square in every RMSNorm (`rms_norm_eps`).
    pub norm_eps: f64,
    /// Biases on the query, key and value projections (`attention_bias`; Qwen2 has them).
    pub qkv_bias: bool,
    /// An RMSNorm over each head's features on the queries and the keys, before the rotation
    /// (Qwen3).
    pub qk_norm: bool,
}

impl LlamaOptions {
    /// The options a model of `width` features in `heads` heads takes by default: multi-head
    /// (`kv_heads = heads`), `width / heads` features a head, an MLP of `8/3` of the width
    /// rounded up to a multiple of 256 as Llama sizes it, `rope_theta` 10 000, no scaling,
    /// `norm_eps` 1e-5, no biases, no query/key norm.
    pub fn for_width(width: usize, heads: usize) -> Self {
        let mlp_width = (8 * width / 3).div_ceil(256) * 256;
        Self {
            kv_heads: heads,
            head_dim: width.checked_div(heads).unwrap_or(0),
            mlp_width,
            rope_theta: 10_000.0,
            rope_scaling: None,
            norm_eps: 1e-5,
            qkv_bias: false,
            qk_norm: false,
        }
    }

    /// The rotary frequencies of a head, `[head_dim / 2]`, or why the options give none.
    pub fn frequencies(&self) -> Result<Vec<f64>, String> {
        inv_freq(self.head_dim, self.rope_theta, self.rope_scaling).map_err(|e| e.to_string())
    }

    /// The shape of its attention: `1 / sqrt(head_dim)` scores over the whole past.
    pub fn attention(&self) -> GroupedAttention {
        GroupedAttention {
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            qkv_bias: self.qkv_bias,
            head_norm: self.qk_norm.then_some(HeadNorm {
                eps: self.norm_eps,
                unit_offset: false,
            }),
            scale: 1.0 / (self.head_dim as f64).sqrt(),
            window: None,
        }
    }

    /// Every way the options fail to make a model of `heads` query heads, each with the field
    /// it is about.
    pub(crate) fn problems(&self, heads: usize) -> Vec<(&'static str, String)> {
        let mut problems = self.attention().problems(heads);
        if problems.iter().all(|(field, _)| *field != "head_dim")
            && let Err(detail) = self.frequencies()
        {
            problems.push(("rope_theta", detail));
        }
        if self.mlp_width == 0 {
            problems.push(("mlp_width", "0, where at least 1 is needed".to_owned()));
        }
        if !(self.norm_eps.is_finite() && self.norm_eps >= 0.0) {
            let detail = format!("{} is not a finite number >= 0", self.norm_eps);
            problems.push(("norm_eps", detail));
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_sizes_the_mlp_to_a_multiple_of_256() {
        // Llama's 4096 wide models have an 11008 wide MLP: 8/3 of 4096, rounded up to 256.
        assert_eq!(LlamaOptions::for_width(4096, 32).mlp_width, 11008);
        assert_eq!(LlamaOptions::for_width(4096, 32).head_dim, 128);
    }

    #[test]
    fn problems_name_the_field() {
        let options = LlamaOptions {
            kv_heads: 3,
            ..LlamaOptions::for_width(64, 4)
        };
        assert_eq!(options.problems(4)[0].0, "kv_heads");
        let options = LlamaOptions {
            head_dim: 7,
            ..LlamaOptions::for_width(64, 4)
        };
        assert_eq!(options.problems(4)[0].0, "head_dim");
        let options = LlamaOptions {
            rope_theta: -1.0,
            ..LlamaOptions::for_width(64, 4)
        };
        assert_eq!(options.problems(4)[0].0, "rope_theta");
        assert!(LlamaOptions::for_width(64, 4).problems(4).is_empty());
    }
}
