//! The options of Gemma 3, named after the `config.json` fields they come from.

use headroom_kernels::ops::rotary::inv_freq;

use crate::layers::attention::{GroupedAttention, HeadNorm};

/// The options of a Gemma 3 decoder (`Gemma3ForCausalLM`, `model_type` `gemma3_text`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemma3Options {
    /// Key/value heads (`num_key_value_heads`); they divide the query heads.
    pub kv_heads: usize,
    /// Features per head (`head_dim`), even.
    pub head_dim: usize,
    /// The MLP's inner width (`intermediate_size`).
    pub mlp_width: usize,
    /// The rotary base of the global layers (`rope_theta`).
    pub rope_theta: f64,
    /// The rotary base of the sliding-window layers (`rope_local_base_freq`).
    pub rope_local_theta: f64,
    /// Added to the mean square in every RMSNorm (`rms_norm_eps`).
    pub norm_eps: f64,
    /// The scores are scaled by its inverse square root (`query_pre_attn_scalar`).
    pub query_pre_attn_scalar: usize,
    /// Keys a query of a sliding-window layer sees, itself included (`sliding_window`).
    pub sliding_window: usize,
    /// Every this many layers, the last attends globally, the others through the window
    /// (`sliding_window_pattern`: 6, five local layers to one global).
    pub sliding_window_pattern: usize,
}

impl Gemma3Options {
    /// The options a model of `width` features in `heads` heads takes by default: multi-head,
    /// `width / heads` features a head scaled by their inverse square root, Llama's MLP width
    /// (8/3 of the width rounded up to 256), bases 1e6 and 1e4, `norm_eps` 1e-6, a window of
    /// 4096 on five layers of six: transformers' defaults where it has them.
    pub fn for_width(width: usize, heads: usize) -> Self {
        let head_dim = width.checked_div(heads).unwrap_or(0);
        Self {
            kv_heads: heads,
            head_dim,
            mlp_width: (8 * width / 3).div_ceil(256) * 256,
            rope_theta: 1_000_000.0,
            rope_local_theta: 10_000.0,
            norm_eps: 1e-6,
            query_pre_attn_scalar: head_dim,
            sliding_window: 4096,
            sliding_window_pattern: 6,
        }
    }

    /// Whether layer `index` (from 0) attends through the sliding window, as transformers'
    /// default `layer_types` has it.
    pub fn is_sliding(&self, index: usize) -> bool {
        !(index + 1).is_multiple_of(self.sliding_window_pattern.max(1))
    }

    /// The rotary base of layer `index`.
    pub fn rope_theta_of(&self, index: usize) -> f64 {
        match self.is_sliding(index) {
            true => self.rope_local_theta,
            false => self.rope_theta,
        }
    }

    /// The shape of layer `index`'s attention.
    pub fn attention(&self, index: usize) -> GroupedAttention {
        GroupedAttention {
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            qkv_bias: false,
            head_norm: Some(HeadNorm {
                eps: self.norm_eps,
                unit_offset: true,
            }),
            scale: 1.0 / (self.query_pre_attn_scalar as f64).sqrt(),
            window: self.is_sliding(index).then_some(self.sliding_window),
        }
    }

    /// Every way the options fail to make a model of `heads` query heads, each with the field
    /// it is about.
    pub(crate) fn problems(&self, heads: usize) -> Vec<(&'static str, String)> {
        // Every layer's attention has the shape of the first but for its window.
        let mut problems = self.attention(0).problems(heads);
        if problems.iter().all(|(field, _)| *field != "head_dim") {
            for (field, theta) in [
                ("rope_theta", self.rope_theta),
                ("rope_local_theta", self.rope_local_theta),
            ] {
                if let Err(err) = inv_freq(self.head_dim, theta, None) {
                    problems.push((field, err.to_string()));
                }
            }
        }
        for (field, value) in [
            ("mlp_width", self.mlp_width),
            ("query_pre_attn_scalar", self.query_pre_attn_scalar),
            ("sliding_window", self.sliding_window),
            ("sliding_window_pattern", self.sliding_window_pattern),
        ] {
            if value == 0 {
                problems.push((field, "0, where at least 1 is needed".to_owned()));
            }
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

    fn gemma_3_1b() -> Gemma3Options {
        Gemma3Options {
            kv_heads: 1,
            head_dim: 256,
            mlp_width: 6912,
            rope_theta: 1_000_000.0,
            rope_local_theta: 10_000.0,
            norm_eps: 1e-6,
            query_pre_attn_scalar: 256,
            sliding_window: 512,
            sliding_window_pattern: 6,
        }
    }

    #[test]
    fn five_layers_of_six_slide_with_their_own_base() {
        let options = gemma_3_1b();
        let sliding: Vec<bool> = (0..12).map(|i| options.is_sliding(i)).collect();
        let global = [false, false, false, false, false, true];
        let want: Vec<bool> = global.iter().chain(&global).map(|g| !g).collect();
        assert_eq!(sliding, want);
        assert_eq!(options.rope_theta_of(0), 10_000.0);
        assert_eq!(options.rope_theta_of(5), 1_000_000.0);
        assert_eq!(options.attention(0).window, Some(512));
        assert_eq!(options.attention(5).window, None);
        assert_eq!(options.attention(0).scale, 1.0 / 16.0);
    }

    #[test]
    fn problems_name_the_field() {
        assert!(gemma_3_1b().problems(4).is_empty());
        let options = Gemma3Options {
            sliding_window: 0,
            ..gemma_3_1b()
        };
        assert_eq!(options.problems(4)[0].0, "sliding_window");
        let options = Gemma3Options {
            kv_heads: 3,
            ..gemma_3_1b()
        };
        assert_eq!(options.problems(4)[0].0, "kv_heads");
        let options = Gemma3Options {
            query_pre_attn_scalar: 0,
            ..gemma_3_1b()
        };
        assert_eq!(options.problems(4)[0].0, "query_pre_attn_scalar");
    }
}
