//! A Hugging Face GPT-2 `config.json`: what Headroom reads from it and writes to it.

use std::path::Path;

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::json_fields::{CONFIG_FILE, Fields, read_json, write_json};
use crate::models::decoder_config::GptConfig;
use crate::models::family::Family;

/// The activations Headroom's GELU (the tanh approximation) computes.
const ACTIVATIONS: [&str; 2] = ["gelu_new", "gelu_pytorch_tanh"];

/// The part of a `transformers.GPT2Config` that a [`Gpt`](crate::Gpt) can be: its shape, the
/// norms' epsilon, whether the head is tied, the dropouts and the special tokens.
///
/// [`read`](Self::read) accepts only what Headroom computes the same way as transformers: the
/// tanh GELU (`gelu_new` or `gelu_pytorch_tanh`), an MLP of `4 * n_embd` (`n_inner` null),
/// scores scaled by `1 / sqrt(head width)` alone (`scale_attn_weights` true,
/// `scale_attn_by_inverse_layer_idx` and `reorder_and_upcast_attn` false), no cross-attention.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2Config {
    /// Number of distinct tokens.
    pub vocab_size: usize,
    /// Longest sequence (rows of the position table).
    pub n_positions: usize,
    /// Features per position.
    pub n_embd: usize,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// The MLP's inner width; none for `4 * n_embd`, the only width Headroom builds.
    pub n_inner: Option<usize>,
    /// The activation's name in transformers (`gelu_new` or `gelu_pytorch_tanh`).
    pub activation_function: String,
    /// Added to the variance in every layer norm.
    pub layer_norm_epsilon: f64,
    /// The head shares the token embedding's weight.
    pub tie_word_embeddings: bool,
    /// Dropout on the embeddings.
    pub embd_pdrop: f64,
    /// Dropout on the attention weights.
    pub attn_pdrop: f64,
    /// Dropout on the residual branches.
    pub resid_pdrop: f64,
    /// The token that starts a text, if named.
    pub bos_token_id: Option<u64>,
    /// The token that ends a text, if named.
    pub eos_token_id: Option<u64>,
}

impl Gpt2Config {
    /// Reads `dir/config.json`. A missing or unreadable file is [`Error::Io`]; a file that is
    /// not a JSON object, a field of the wrong type, a missing shape field or a setting Headroom
    /// does not compute is [`Error::Checkpoint`] naming the file and the field.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(CONFIG_FILE);
        Self::from_json(&path, &read_json(&path)?)
    }

    /// Reads the configuration from a parsed `config.json` (`path` names it in errors), with
    /// the checks of [`read`](Self::read).
    pub fn from_json(path: &Path, value: &Value) -> Result<Self> {
        let map = value.as_object().ok_or_else(|| Error::Checkpoint {
            path: path.to_owned(),
            key: "(file)".into(),
            detail: "not a JSON object".into(),
        })?;
        let fields = Fields { path, map };
        if let Some(kind) = fields.get("model_type")
            && kind.as_str() != Some("gpt2")
        {
            return Err(fields.error("model_type", format!("{kind}, where \"gpt2\" is needed")));
        }
        let activation = match fields.get("activation_function") {
            None => "gelu_new".to_owned(),
            Some(v) => match v.as_str() {
                Some(name) if ACTIVATIONS.contains(&name) => name.to_owned(),
                _ => {
                    return Err(fields.error(
                        "activation_function",
                        format!("{v} is not supported: Headroom computes the tanh GELU (gelu_new)"),
                    ));
                }
            },
        };
        fields.require_flag("scale_attn_weights", true, "scores are always scaled")?;
        fields.require_flag(
            "scale_attn_by_inverse_layer_idx",
            false,
            "scores are scaled by the head width alone",
        )?;
        fields.require_flag(
            "reorder_and_upcast_attn",
            false,
            "attention runs in the autocast dtype",
        )?;
        fields.require_flag("add_cross_attention", false, "a GPT has no encoder")?;
        let config = Self {
            vocab_size: fields.size("vocab_size")?,
            n_positions: fields.size("n_positions")?,
            n_embd: fields.size("n_embd")?,
            n_layer: fields.size("n_layer")?,
            n_head: fields.size("n_head")?,
            n_inner: fields
                .count("n_inner")?
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            activation_function: activation,
            layer_norm_epsilon: fields.number("layer_norm_epsilon", 1e-5)?,
            tie_word_embeddings: fields.flag("tie_word_embeddings", true)?,
            embd_pdrop: fields.number("embd_pdrop", 0.1)?,
            attn_pdrop: fields.number("attn_pdrop", 0.1)?,
            resid_pdrop: fields.number("resid_pdrop", 0.1)?,
            bos_token_id: fields.count("bos_token_id")?,
            eos_token_id: fields.count("eos_token_id")?,
        };
        if let Some(inner) = config.n_inner
            && inner != 4 * config.n_embd
        {
            return Err(fields.error(
                "n_inner",
                format!(
                    "{inner} is not supported: Headroom's MLP is 4 * n_embd = {} wide",
                    4 * config.n_embd
                ),
            ));
        }
        if config.layer_norm_epsilon.is_nan() || config.layer_norm_epsilon < 0.0 {
            return Err(fields.error("layer_norm_epsilon", "not a number of at least 0"));
        }
        if let Some((field, detail)) = config.gpt_config(0.0).problems().into_iter().next() {
            return Err(fields.error(hf_field(field), detail));
        }
        Ok(config)
    }

    /// The shape of a [`Gpt`](crate::Gpt) that holds this model, with `dropout` everywhere
    /// (transformers' three dropouts are left to the caller: 0 to evaluate, or one of them to
    /// train on). Its context is `n_positions`; a smaller one crops the position table.
    pub fn gpt_config(&self, dropout: f64) -> GptConfig {
        GptConfig {
            vocab: self.vocab_size,
            context: self.n_positions,
            width: self.n_embd,
            heads: self.n_head,
            layers: self.n_layer,
            dropout,
            tie_embeddings: self.tie_word_embeddings,
            family: Family::Gpt2,
        }
    }

    /// The configuration of a GPT of `config`: `n_positions` is its context, every dropout its
    /// dropout, the epsilon PyTorch's 1e-5 (the default of [`LayerNorm`](crate::LayerNorm)),
    /// and the last token marks both the start and the end of a text.
    pub fn from_gpt(config: &GptConfig) -> Self {
        let last = config.vocab.checked_sub(1).map(|id| id as u64);
        Self {
            vocab_size: config.vocab,
            n_positions: config.context,
            n_embd: config.width,
            n_layer: config.layers,
            n_head: config.heads,
            n_inner: None,
            activation_function: "gelu_new".into(),
            layer_norm_epsilon: 1e-5,
            tie_word_embeddings: config.tie_embeddings,
            embd_pdrop: config.dropout,
            attn_pdrop: config.dropout,
            resid_pdrop: config.dropout,
            bos_token_id: last,
            eos_token_id: last,
        }
    }

    /// The `config.json` that `transformers.GPT2Config` loads: these fields, transformers'
    /// defaults for the rest (initializer range, the summary head of the double-heads model),
    /// `"model_type": "gpt2"` and `"architectures": ["GPT2LMHeadModel"]`.
    pub fn to_json(&self) -> Value {
        json!({
            "activation_function": self.activation_function,
            "architectures": ["GPT2LMHeadModel"],
            "attn_pdrop": self.attn_pdrop,
            "bos_token_id": self.bos_token_id,
            "embd_pdrop": self.embd_pdrop,
            "eos_token_id": self.eos_token_id,
            "initializer_range": 0.02,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "model_type": "gpt2",
            "n_ctx": self.n_positions,
            "n_embd": self.n_embd,
            "n_head": self.n_head,
            "n_inner": self.n_inner,
            "n_layer": self.n_layer,
            "n_positions": self.n_positions,
            "reorder_and_upcast_attn": false,
            "resid_pdrop": self.resid_pdrop,
            "scale_attn_by_inverse_layer_idx": false,
            "scale_attn_weights": true,
            "summary_activation": null,
            "summary_first_dropout": 0.1,
            "summary_proj_to_labels": true,
            "summary_type": "cls_index",
            "summary_use_proj": true,
            "tie_word_embeddings": self.tie_word_embeddings,
            "torch_dtype": "float32",
            "use_cache": true,
            "vocab_size": self.vocab_size,
        })
    }

    /// Writes [`to_json`](Self::to_json) to `dir/config.json`, atomically.
    pub fn write(&self, dir: &Path) -> Result<()> {
        write_json(&dir.join(CONFIG_FILE), &self.to_json())
    }
}

/// The `config.json` field of a [`GptConfig`] field (or of the trainer's `norm_eps` and
/// `family`).
pub(crate) fn hf_field(field: &str) -> &'static str {
    match field {
        "vocab" => "vocab_size",
        "context" => "n_positions",
        "width" => "n_embd",
        "heads" => "n_head",
        "layers" => "n_layer",
        "tie_embeddings" => "tie_word_embeddings",
        "norm_eps" => "layer_norm_epsilon",
        "family" => "architectures",
        _ => "(file)",
    }
}
