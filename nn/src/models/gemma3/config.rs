//! A Hugging Face Gemma 3 `config.json` (`Gemma3ForCausalLM`, `model_type` `gemma3_text`): what
//! Headroom reads from it and writes to it.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::error::Result;
use crate::json_fields::{CONFIG_FILE, Fields, read_json, token_ids_value, write_json};
use crate::models::decoder_config::GptConfig;
use crate::models::family::Family;
use crate::models::gemma3::options::Gemma3Options;
use crate::models::llama;

/// The class name in `architectures`.
pub const CLASS: &str = "Gemma3ForCausalLM";
/// The `model_type`.
pub const MODEL_TYPE: &str = "gemma3_text";
/// The activation Headroom's GeGLU computes (GELU's tanh form).
const ACTIVATION: &str = "gelu_pytorch_tanh";

/// The part of a Gemma 3 `config.json` that a Gemma 3 [`Gpt`](crate::Gpt) can be.
///
/// [`read`](Self::read) takes both layouts: the published one (`rope_theta`,
/// `rope_local_base_freq`, `sliding_window_pattern`) and transformers 5's (`rope_parameters`
/// keyed by layer type, `layer_types`). It accepts only what Headroom computes as transformers
/// does: the tanh GELU, no logit soft-capping, no attention biases, causal attention, the
/// default rotary frequencies, and layer types that repeat a pattern ending on a global layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma3Config {
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
    /// The rest of the shape and the options.
    pub options: Gemma3Options,
    /// `tie_word_embeddings` (true unless the file says otherwise).
    pub tie_word_embeddings: bool,
    /// `bos_token_id`, if named.
    pub bos_token_id: Option<u64>,
    /// `eos_token_id`: one id or several.
    pub eos_token_ids: Vec<u64>,
    /// `pad_token_id`, if named.
    pub pad_token_id: Option<u64>,
    /// `torch_dtype` (or `dtype`), if named.
    pub torch_dtype: Option<String>,
}

impl Gemma3Config {
    /// Reads `dir/config.json`, with the errors of the other families' readers: a missing
    /// file is an `Error::Io`, a field Headroom cannot compute an `Error::Checkpoint` naming it.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(CONFIG_FILE);
        Self::from_json(&path, &read_json(&path)?)
    }

    /// Reads the configuration from a parsed `config.json` (`path` names it in errors).
    pub fn from_json(path: &Path, value: &Value) -> Result<Self> {
        let empty = Map::new();
        let fields = Fields {
            path,
            map: value.as_object().unwrap_or(&empty),
        };
        check_class(&fields)?;
        check_unsupported(&fields)?;
        let layers = fields.size("num_hidden_layers")?;
        let (rope_theta, rope_local_theta) = rope(&fields)?;
        let options = Gemma3Options {
            kv_heads: fields.size("num_key_value_heads")?,
            head_dim: fields.count("head_dim")?.map_or(256, |d| d as usize),
            mlp_width: fields.size("intermediate_size")?,
            rope_theta,
            rope_local_theta,
            norm_eps: fields.number("rms_norm_eps", 1e-6)?,
            query_pre_attn_scalar: fields
                .count("query_pre_attn_scalar")?
                .map_or(256, |q| q as usize),
            sliding_window: fields.count("sliding_window")?.map_or(4096, |w| w as usize),
            sliding_window_pattern: pattern(&fields, layers)?,
        };
        let config = Self {
            vocab_size: fields.size("vocab_size")?,
            max_position_embeddings: fields
                .count("max_position_embeddings")?
                .map_or(131_072, |n| n as usize),
            hidden_size: fields.size("hidden_size")?,
            num_hidden_layers: layers,
            num_attention_heads: fields.size("num_attention_heads")?,
            options,
            tie_word_embeddings: fields.flag("tie_word_embeddings", true)?,
            bos_token_id: fields.count("bos_token_id")?,
            eos_token_ids: fields.token_ids("eos_token_id")?,
            pad_token_id: fields.count("pad_token_id")?,
            torch_dtype: fields.torch_dtype(),
        };
        if let Some((field, detail)) = config.gpt_config(0.0).problems().into_iter().next() {
            return Err(fields.error(hf_field(field), detail));
        }
        Ok(config)
    }

    /// The shape of a [`Gpt`](crate::Gpt) that holds this model, with `dropout` everywhere.
    pub fn gpt_config(&self, dropout: f64) -> GptConfig {
        GptConfig {
            vocab: self.vocab_size,
            context: self.max_position_embeddings,
            width: self.hidden_size,
            heads: self.num_attention_heads,
            layers: self.num_hidden_layers,
            dropout,
            tie_embeddings: self.tie_word_embeddings,
            family: Family::Gemma3(self.options),
        }
    }

    /// The configuration of a Gemma 3 model of `config` (none for another family), with the
    /// token ids given.
    pub fn from_gpt(config: &GptConfig, bos: Option<u64>, eos: Option<u64>) -> Option<Self> {
        let Family::Gemma3(options) = config.family else {
            return None;
        };
        Some(Self {
            vocab_size: config.vocab,
            max_position_embeddings: config.context,
            hidden_size: config.width,
            num_hidden_layers: config.layers,
            num_attention_heads: config.heads,
            options,
            tie_word_embeddings: config.tie_embeddings,
            bos_token_id: bos,
            eos_token_ids: eos.into_iter().collect(),
            pad_token_id: None,
            torch_dtype: None,
        })
    }

    /// The `config.json` transformers loads as `Gemma3ForCausalLM`, in the published layout,
    /// its weights saved in `dtype`.
    pub fn to_json(&self, dtype: &str) -> Value {
        let o = &self.options;
        let eos = token_ids_value(&self.eos_token_ids);
        let layer_types: Vec<&str> = (0..self.num_hidden_layers)
            .map(|i| match o.is_sliding(i) {
                true => "sliding_attention",
                false => "full_attention",
            })
            .collect();
        json!({
            "architectures": [CLASS],
            "model_type": MODEL_TYPE,
            "attention_bias": false,
            "attention_dropout": 0.0,
            "attn_logit_softcapping": null,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": eos,
            "final_logit_softcapping": null,
            "head_dim": o.head_dim,
            "hidden_activation": ACTIVATION,
            "hidden_size": self.hidden_size,
            "initializer_range": 0.02,
            "intermediate_size": o.mlp_width,
            "layer_types": layer_types,
            "max_position_embeddings": self.max_position_embeddings,
            "num_attention_heads": self.num_attention_heads,
            "num_hidden_layers": self.num_hidden_layers,
            "num_key_value_heads": o.kv_heads,
            "pad_token_id": self.pad_token_id,
            "query_pre_attn_scalar": o.query_pre_attn_scalar,
            "rms_norm_eps": o.norm_eps,
            "rope_local_base_freq": o.rope_local_theta,
            "rope_scaling": null,
            "rope_theta": o.rope_theta,
            "sliding_window": o.sliding_window,
            "sliding_window_pattern": o.sliding_window_pattern,
            "tie_word_embeddings": self.tie_word_embeddings,
            "torch_dtype": dtype,
            "use_bidirectional_attention": false,
            "use_cache": true,
            "vocab_size": self.vocab_size,
        })
    }

    /// Writes [`to_json`](Self::to_json) to `dir/config.json`, atomically.
    pub fn write(&self, dir: &Path, dtype: &str) -> Result<()> {
        write_json(&dir.join(CONFIG_FILE), &self.to_json(dtype))
    }
}

/// True when the fields of a `config.json` name Gemma 3's text model, by `architectures` or
/// `model_type`.
pub(crate) fn is_gemma3(value: &Map<String, Value>) -> bool {
    let class = value.get("architectures").and_then(|a| a.get(0));
    class.and_then(Value::as_str) == Some(CLASS)
        || value.get("model_type").and_then(Value::as_str) == Some(MODEL_TYPE)
}

/// Errors unless the file names Gemma 3's text model.
fn check_class(fields: &Fields) -> Result<()> {
    if is_gemma3(fields.map) {
        return Ok(());
    }
    let detail = format!("is not {CLASS} (model_type {MODEL_TYPE})");
    Err(fields.error("architectures", detail))
}

/// Errors for each setting Headroom does not compute as transformers does.
fn check_unsupported(fields: &Fields) -> Result<()> {
    for field in ["hidden_activation", "hidden_act"] {
        if let Some(act) = fields.get(field)
            && act.as_str() != Some(ACTIVATION)
        {
            let detail = format!("{act} is not supported: the MLP's gate is {ACTIVATION}");
            return Err(fields.error(field, detail));
        }
    }
    for field in ["attn_logit_softcapping", "final_logit_softcapping"] {
        if let Some(cap) = fields.get(field) {
            let detail = format!("{cap} is not supported: Headroom caps no logits");
            return Err(fields.error(field, detail));
        }
    }
    fields.require_flag("attention_bias", false, "the projections have no biases")?;
    fields.require_flag("use_bidirectional_attention", false, "attention is causal")?;
    Ok(())
}

/// The rotary bases of the global and the sliding layers: `rope_parameters` keyed by layer
/// type (transformers 5), or `rope_theta` and `rope_local_base_freq` without `rope_scaling`.
fn rope(fields: &Fields) -> Result<(f64, f64)> {
    let default = (1_000_000.0, 10_000.0);
    let Some(parameters) = fields.get("rope_parameters") else {
        if let Some(scaling) = fields.get("rope_scaling") {
            let detail =
                format!("{scaling} is not supported: only unscaled rotary frequencies are");
            return Err(fields.error("rope_scaling", detail));
        }
        let global = fields.number("rope_theta", default.0)?;
        return Ok((global, fields.number("rope_local_base_freq", default.1)?));
    };
    let theta = |kind: &str, fallback: f64| {
        let Some(one) = parameters.get(kind) else {
            return Ok(fallback);
        };
        let rope_type = one.get("rope_type").and_then(Value::as_str);
        if rope_type.is_some_and(|t| t != "default") {
            let detail = format!("{kind}: {one} is not supported: only rope_type default is");
            return Err(fields.error("rope_parameters", detail));
        }
        match one.get("rope_theta") {
            None => Ok(fallback),
            Some(v) => v.as_f64().ok_or_else(|| {
                fields.error(
                    "rope_parameters",
                    format!("{kind}: rope_theta {v} is not a number"),
                )
            }),
        }
    };
    Ok((
        theta("full_attention", default.0)?,
        theta("sliding_attention", default.1)?,
    ))
}

/// The period of the global layers: from `layer_types` (which must repeat sliding layers
/// ending on a global one), else `sliding_window_pattern` (or `_sliding_window_pattern`), 6 by
/// default.
fn pattern(fields: &Fields, layers: usize) -> Result<usize> {
    let Some(types) = fields.get("layer_types") else {
        let named = ["sliding_window_pattern", "_sliding_window_pattern"]
            .iter()
            .find_map(|f| fields.count(f).transpose());
        return Ok(named.transpose()?.map_or(6, |p| p as usize));
    };
    let kinds: Vec<Option<&str>> = match types.as_array() {
        Some(kinds) => kinds.iter().map(Value::as_str).collect(),
        None => Vec::new(),
    };
    let period = kinds
        .iter()
        .position(|k| *k == Some("full_attention"))
        .map_or(layers + 1, |first| first + 1);
    let expected = |i: usize| match (i + 1).is_multiple_of(period) {
        true => "full_attention",
        false => "sliding_attention",
    };
    let fits = kinds.len() == layers
        && kinds
            .iter()
            .enumerate()
            .all(|(i, k)| *k == Some(expected(i)));
    if !fits {
        let detail = format!(
            "{types} is not supported: {layers} layers of sliding_attention with every \
             layer a multiple of a period full_attention"
        );
        return Err(fields.error("layer_types", detail));
    }
    Ok(period)
}

/// The `config.json` field of a [`GptConfig`] or [`Gemma3Options`] field: Gemma's own, or the
/// Llama family's name for the fields they share.
pub(crate) fn hf_field(field: &str) -> &'static str {
    match field {
        "rope_local_theta" => "rope_local_base_freq",
        "query_pre_attn_scalar" => "query_pre_attn_scalar",
        "sliding_window" => "sliding_window",
        "sliding_window_pattern" => "sliding_window_pattern",
        _ => llama::config::hf_field(field),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn read(value: Value) -> Result<Gemma3Config> {
        Gemma3Config::from_json(Path::new("config.json"), &value)
    }

    fn smallest() -> Value {
        json!({"architectures": ["Gemma3ForCausalLM"], "vocab_size": 10, "hidden_size": 8,
            "intermediate_size": 16, "num_hidden_layers": 3, "num_attention_heads": 2,
            "num_key_value_heads": 1, "head_dim": 4, "max_position_embeddings": 32,
            "sliding_window": 2, "layer_types": ["sliding_attention", "sliding_attention",
            "full_attention"]})
    }

    #[test]
    fn both_layouts_read_the_same_and_a_written_file_reads_back() {
        let config = read(smallest()).unwrap();
        assert_eq!(config.options.sliding_window_pattern, 3);
        assert_eq!(config.options.rope_theta, 1_000_000.0);
        assert_eq!(config.options.rope_local_theta, 10_000.0);
        assert!(config.tie_word_embeddings);
        let mut v5 = smallest();
        v5["rope_parameters"] = json!({
            "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}});
        assert_eq!(read(v5).unwrap(), config);
        let again = read(config.to_json("float32")).unwrap();
        assert_eq!(again.torch_dtype.as_deref(), Some("float32"));
        assert_eq!(again.options, config.options);
    }

    #[test]
    fn unsupported_settings_name_their_field() {
        for (key, value, field) in [
            ("hidden_activation", json!("gelu"), "hidden_activation"),
            (
                "final_logit_softcapping",
                json!(30.0),
                "final_logit_softcapping",
            ),
            (
                "attn_logit_softcapping",
                json!(50.0),
                "attn_logit_softcapping",
            ),
            (
                "use_bidirectional_attention",
                json!(true),
                "use_bidirectional_attention",
            ),
            (
                "rope_scaling",
                json!({"rope_type": "linear", "factor": 8.0}),
                "rope_scaling",
            ),
            (
                "layer_types",
                json!(["full_attention", "sliding_attention", "full_attention"]),
                "layer_types",
            ),
            (
                "architectures",
                json!(["LlamaForCausalLM"]),
                "architectures",
            ),
            ("num_key_value_heads", json!(3), "num_key_value_heads"),
        ] {
            let mut config = smallest();
            config[key] = value;
            if key == "architectures" {
                config.as_object_mut().unwrap().remove("model_type");
            }
            let err = read(config).unwrap_err();
            assert!(
                matches!(&err, Error::Checkpoint { key, .. } if key == field),
                "{field}: {err}"
            );
        }
    }
}
