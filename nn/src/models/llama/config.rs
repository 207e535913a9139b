//! A Hugging Face `config.json` of the Llama family (`LlamaForCausalLM`, `Qwen2ForCausalLM`,
//! `Qwen3ForCausalLM`, `MistralForCausalLM`): what Headroom reads from it and writes to it.

use std::path::Path;

use headroom_kernels::ops::rotary::Llama3Scaling;
use serde_json::{Map, Value, json};

use crate::error::Result;
use crate::json_fields::{CONFIG_FILE, Fields, read_json, token_ids_value, write_json};
use crate::models::decoder_config::GptConfig;
use crate::models::family::Family;
use crate::models::llama::options::LlamaOptions;

/// The architectures of the Llama family that Headroom reads and writes. They differ only in
/// their options: Qwen2 has biases on the query, key and value projections, Qwen3 an RMSNorm
/// over each query and key head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// `LlamaForCausalLM` (Llama 2 and 3, SmolLM2).
    Llama,
    /// `Qwen2ForCausalLM` (Qwen2, Qwen2.5).
    Qwen2,
    /// `Qwen3ForCausalLM`.
    Qwen3,
    /// `MistralForCausalLM` (without a sliding window).
    Mistral,
}

impl Architecture {
    /// Every one, in order.
    pub const ALL: [Architecture; 4] = [Self::Llama, Self::Qwen2, Self::Qwen3, Self::Mistral];

    /// Its class name in `architectures`.
    pub fn class(self) -> &'static str {
        match self {
            Self::Llama => "LlamaForCausalLM",
            Self::Qwen2 => "Qwen2ForCausalLM",
            Self::Qwen3 => "Qwen3ForCausalLM",
            Self::Mistral => "MistralForCausalLM",
        }
    }

    /// Its `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Mistral => "mistral",
        }
    }

    /// The architecture that holds a model of `options`: Qwen3 for query/key norms, Qwen2 for
    /// q/k/v biases, Llama otherwise; none for both (no published family has them together).
    pub fn of(options: &LlamaOptions) -> Option<Self> {
        match (options.qk_norm, options.qkv_bias) {
            (true, true) => None,
            (true, false) => Some(Self::Qwen3),
            (false, true) => Some(Self::Qwen2),
            (false, false) => Some(Self::Llama),
        }
    }
}

/// The part of a Llama-family `config.json` that a Llama-family [`Gpt`](crate::Gpt) can be.
///
/// [`read`](Self::read) accepts only what Headroom computes the same way as transformers: the
/// SiLU gate (`hidden_act` `silu`), no MLP biases, no output-projection bias, rope scaling
/// none or `llama3`, and no sliding window.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// Which class the directory holds.
    pub architecture: Architecture,
    /// `vocab_size`.
    pub vocab_size: usize,
    /// `max_position_embeddings`: the context.
    pub max_position_embeddings: usize,
    /// `hidden_size`.
    pub hidden_size: usize,
    /// `num_hidden_layers`.
    pub num_hidden_layers: usize,
    /// `num_attention_heads`.
    pub num_attention_heads: usize,
    /// The rest of the shape and the options (`num_key_value_heads`, `head_dim`,
    /// `intermediate_size`, `rope_theta`, `rope_scaling`, `rms_norm_eps`, the Qwen options).
    pub options: LlamaOptions,
    /// `tie_word_embeddings`.
    pub tie_word_embeddings: bool,
    /// `bos_token_id`, if named.
    pub bos_token_id: Option<u64>,
    /// `eos_token_id`: one id or several (Llama 3's instruct models end on any of three).
    pub eos_token_ids: Vec<u64>,
    /// `torch_dtype` (or `dtype`): the dtype the weights were saved in, if named.
    pub torch_dtype: Option<String>,
}

impl LlamaConfig {
    /// Reads `dir/config.json`. A missing or unreadable file is
    /// [`Error::Io`](crate::Error::Io); a file that is not a JSON object, a field of the wrong
    /// type, a missing shape field, another architecture or a setting Headroom does not compute
    /// is [`Error::Checkpoint`](crate::Error::Checkpoint) naming the file and the field.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(CONFIG_FILE);
        Self::from_json(&path, &read_json(&path)?)
    }

    /// Reads the configuration from a parsed `config.json` (`path` names it in errors), with
    /// the checks of [`read`](Self::read).
    pub fn from_json(path: &Path, value: &Value) -> Result<Self> {
        let empty = Map::new();
        let fields = Fields {
            path,
            map: value.as_object().unwrap_or(&empty),
        };
        let architecture = architecture(&fields)?;
        check_unsupported(&fields, architecture)?;
        let (hidden_size, heads) = (
            fields.size("hidden_size")?,
            fields.size("num_attention_heads")?,
        );
        let (rope_theta, rope_scaling) = rope(&fields)?;
        let options = LlamaOptions {
            kv_heads: fields
                .count("num_key_value_heads")?
                .map_or(heads, |n| n as usize),
            head_dim: match fields.count("head_dim")? {
                Some(d) => d as usize,
                None => hidden_size.checked_div(heads).unwrap_or(0),
            },
            mlp_width: fields.size("intermediate_size")?,
            rope_theta,
            rope_scaling,
            norm_eps: fields.number("rms_norm_eps", 1e-6)?,
            qkv_bias: architecture == Architecture::Qwen2,
            qk_norm: architecture == Architecture::Qwen3,
        };
        let config = Self {
            architecture,
            vocab_size: fields.size("vocab_size")?,
            max_position_embeddings: fields.size("max_position_embeddings")?,
            hidden_size,
            num_hidden_layers: fields.size("num_hidden_layers")?,
            num_attention_heads: heads,
            options,
            tie_word_embeddings: fields.flag("tie_word_embeddings", false)?,
            bos_token_id: fields.count("bos_token_id")?,
            eos_token_ids: fields.token_ids("eos_token_id")?,
            torch_dtype: fields.torch_dtype(),
        };
        if let Some((field, detail)) = config.gpt_config(0.0).problems().into_iter().next() {
            return Err(fields.error(hf_field(field), detail));
        }
        Ok(config)
    }

    /// The shape of a [`Gpt`](crate::Gpt) that holds this model, with `dropout` everywhere.
    /// Its context is `max_position_embeddings`.
    pub fn gpt_config(&self, dropout: f64) -> GptConfig {
        GptConfig {
            vocab: self.vocab_size,
            context: self.max_position_embeddings,
            width: self.hidden_size,
            heads: self.num_attention_heads,
            layers: self.num_hidden_layers,
            dropout,
            tie_embeddings: self.tie_word_embeddings,
            family: Family::Llama(self.options),
        }
    }

    /// The configuration of a Llama-family model of `config` (none for GPT-2's family or
    /// options no architecture has together, [`Architecture::of`]), with the token ids given.
    pub fn from_gpt(config: &GptConfig, bos: Option<u64>, eos: Option<u64>) -> Option<Self> {
        let Family::Llama(options) = config.family else {
            return None;
        };
        Some(Self {
            architecture: Architecture::of(&options)?,
            vocab_size: config.vocab,
            max_position_embeddings: config.context,
            hidden_size: config.width,
            num_hidden_layers: config.layers,
            num_attention_heads: config.heads,
            options,
            tie_word_embeddings: config.tie_embeddings,
            bos_token_id: bos,
            eos_token_ids: eos.into_iter().collect(),
            torch_dtype: None,
        })
    }

    /// The `config.json` that transformers' class of the architecture loads, its weights
    /// saved in `dtype` (`float32`, `bfloat16`, ...).
    pub fn to_json(&self, dtype: &str) -> Value {
        let o = &self.options;
        let scaling = o.rope_scaling.map(|s| {
            json!({
                "rope_type": "llama3",
                "factor": s.factor,
                "low_freq_factor": s.low_freq_factor,
                "high_freq_factor": s.high_freq_factor,
                "original_max_position_embeddings": s.original_max_position_embeddings,
            })
        });
        let eos = token_ids_value(&self.eos_token_ids);
        let mut value = json!({
            "architectures": [self.architecture.class()],
            "model_type": self.architecture.model_type(),
            "attention_dropout": 0.0,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": eos,
            "head_dim": o.head_dim,
            "hidden_act": "silu",
            "hidden_size": self.hidden_size,
            "initializer_range": 0.02,
            "intermediate_size": o.mlp_width,
            "max_position_embeddings": self.max_position_embeddings,
            "num_attention_heads": self.num_attention_heads,
            "num_hidden_layers": self.num_hidden_layers,
            "num_key_value_heads": o.kv_heads,
            "rms_norm_eps": o.norm_eps,
            "rope_scaling": scaling,
            "rope_theta": o.rope_theta,
            "tie_word_embeddings": self.tie_word_embeddings,
            "torch_dtype": dtype,
            "use_cache": true,
            "vocab_size": self.vocab_size,
        });
        let extra = match self.architecture {
            Architecture::Llama => json!({"attention_bias": false, "mlp_bias": false,
                "pretraining_tp": 1}),
            Architecture::Qwen2 | Architecture::Qwen3 => json!({"attention_bias": false,
                "use_sliding_window": false, "sliding_window": null,
                "max_window_layers": self.num_hidden_layers}),
            Architecture::Mistral => json!({"sliding_window": null}),
        };
        if let (Some(value), Value::Object(extra)) = (value.as_object_mut(), extra) {
            value.extend(extra);
        }
        value
    }

    /// Writes [`to_json`](Self::to_json) to `dir/config.json`, atomically.
    pub fn write(&self, dir: &Path, dtype: &str) -> Result<()> {
        write_json(&dir.join(CONFIG_FILE), &self.to_json(dtype))
    }
}

/// The architecture `architectures` (or, without it, `model_type`) names.
fn architecture(fields: &Fields) -> Result<Architecture> {
    if let Some(classes) = fields.get("architectures") {
        let name = classes.get(0).and_then(Value::as_str).unwrap_or_default();
        return Architecture::ALL
            .into_iter()
            .find(|a| a.class() == name)
            .ok_or_else(|| {
                fields.error(
                    "architectures",
                    format!(
                        "{classes} is not one Headroom reads: LlamaForCausalLM, \
                         Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM or \
                         GPT2LMHeadModel"
                    ),
                )
            });
    }
    let kind = fields.get("model_type").and_then(Value::as_str);
    Architecture::ALL
        .into_iter()
        .find(|a| Some(a.model_type()) == kind)
        .ok_or_else(|| {
            fields.error(
                "model_type",
                format!("{kind:?} is not llama, qwen2, qwen3 or mistral"),
            )
        })
}

/// Errors for each setting Headroom does not compute as transformers does.
fn check_unsupported(fields: &Fields, architecture: Architecture) -> Result<()> {
    if let Some(act) = fields.get("hidden_act")
        && act.as_str() != Some("silu")
    {
        let detail = format!("{act} is not supported: the MLP's gate is SiLU (silu)");
        return Err(fields.error("hidden_act", detail));
    }
    fields.require_flag("mlp_bias", false, "the MLP's layers have no biases")?;
    if architecture != Architecture::Qwen2 {
        // Llama's and Qwen3's `attention_bias` also puts a bias on the output projection.
        fields.require_flag(
            "attention_bias",
            false,
            "the attention's projections have no biases (Qwen2 has them on q/k/v)",
        )?;
    }
    let window = match architecture {
        Architecture::Qwen2 | Architecture::Qwen3 => fields.flag("use_sliding_window", false)?,
        _ => fields.get("sliding_window").is_some(),
    };
    if window {
        let field = match architecture {
            Architecture::Mistral => "sliding_window",
            _ => "use_sliding_window",
        };
        let detail = "sliding-window attention is not supported: every position attends to \
                      the whole past";
        return Err(fields.error(field, detail));
    }
    Ok(())
}

/// The rotary base and scaling: `rope_theta` and `rope_scaling` (none, or Llama 3's), or
/// both in `rope_parameters` as transformers 5 writes them.
fn rope(fields: &Fields) -> Result<(f64, Option<Llama3Scaling>)> {
    let (parameters, field) = match fields.get("rope_parameters") {
        Some(parameters) => (Some(parameters), "rope_parameters"),
        None => (fields.get("rope_scaling"), "rope_scaling"),
    };
    let empty = Map::new();
    let map = parameters.and_then(Value::as_object).unwrap_or(&empty);
    let inner = Fields {
        path: fields.path,
        map,
    };
    let theta = match field {
        "rope_parameters" => inner.number("rope_theta", 10_000.0)?,
        _ => fields.number("rope_theta", 10_000.0)?,
    };
    let kind = inner.get("rope_type").or_else(|| inner.get("type"));
    match kind.and_then(Value::as_str) {
        None if parameters.is_none() => return Ok((theta, None)),
        Some("default") => return Ok((theta, None)),
        Some("llama3") => {}
        _ => {
            let detail = format!(
                "{} is not supported: only rope_type llama3 (or none) is",
                parameters.unwrap_or(&Value::Null)
            );
            return Err(fields.error(field, detail));
        }
    }
    let number = |key: &str| {
        inner
            .get(key)
            .and_then(Value::as_f64)
            .ok_or_else(|| fields.error(field, format!("{key} is missing")))
    };
    let scaling = Llama3Scaling {
        factor: number("factor")?,
        low_freq_factor: number("low_freq_factor")?,
        high_freq_factor: number("high_freq_factor")?,
        original_max_position_embeddings: number("original_max_position_embeddings")? as usize,
    };
    Ok((theta, Some(scaling)))
}

/// The `config.json` field of a [`GptConfig`] or [`LlamaOptions`] field (or of the
/// trainer's `max_positions` and `family`).
pub(crate) fn hf_field(field: &str) -> &'static str {
    match field {
        "vocab" => "vocab_size",
        "context" | "max_positions" => "max_position_embeddings",
        "tie_embeddings" => "tie_word_embeddings",
        "family" => "architectures",
        "width" => "hidden_size",
        "heads" => "num_attention_heads",
        "layers" => "num_hidden_layers",
        "kv_heads" => "num_key_value_heads",
        "head_dim" => "head_dim",
        "mlp_width" => "intermediate_size",
        "rope_theta" => "rope_theta",
        "norm_eps" => "rms_norm_eps",
        _ => "(file)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn read(value: Value) -> Result<LlamaConfig> {
        LlamaConfig::from_json(Path::new("config.json"), &value)
    }

    fn smallest() -> Value {
        json!({"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 8,
            "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
            "max_position_embeddings": 32})
    }

    #[test]
    fn transformers_defaults_fill_what_is_absent() {
        let config = read(smallest()).unwrap();
        assert_eq!(config.options.kv_heads, 2);
        assert_eq!(config.options.head_dim, 4);
        assert_eq!(config.options.norm_eps, 1e-6);
        assert!(!config.tie_word_embeddings);
        let again = read(config.to_json("float32")).unwrap();
        assert_eq!(again.torch_dtype.as_deref(), Some("float32"));
        assert_eq!(
            LlamaConfig {
                torch_dtype: None,
                ..again
            },
            config
        );
    }

    #[test]
    fn unsupported_settings_name_their_field() {
        for (key, value, field) in [
            ("hidden_act", json!("gelu"), "hidden_act"),
            ("mlp_bias", json!(true), "mlp_bias"),
            ("attention_bias", json!(true), "attention_bias"),
            (
                "rope_scaling",
                json!({"rope_type": "yarn", "factor": 4.0}),
                "rope_scaling",
            ),
            ("architectures", json!(["PhiForCausalLM"]), "architectures"),
            ("num_key_value_heads", json!(3), "num_key_value_heads"),
        ] {
            let mut config = smallest();
            config[key] = value;
            let err = read(config).unwrap_err();
            assert!(
                matches!(&err, Error::Checkpoint { key, .. } if key == field),
                "{field}: {err}"
            );
        }
    }
}
