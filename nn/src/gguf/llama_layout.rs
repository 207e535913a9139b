//! The Llama family in GGUF files: which of llama.cpp's architectures are Headroom's Llama
//! family, the [`LlamaConfig`] their `{arch}.*` keys describe, and each of the model's
//! parameters read from the tensors that hold it.
//!
//! llama.cpp's converter (`convert_hf_to_gguf.py`) reorders the rows of the query and key
//! projections of `llama` models so that the two halves a head rotates together become
//! adjacent pairs ([`permute_rows`]); reading undoes it ([`unpermute_rows`]). Qwen2 and Qwen3
//! files keep transformers' order.

use std::f64::consts::PI;

use headroom_kernels::ops::rotary::{Llama3Scaling, inv_freq};

use super::file::{key_item, tensor_item};
use super::{GgufFile, Value};
use crate::error::Result;
use crate::models::llama::names::gguf_names;
use crate::models::llama::{Architecture, LlamaConfig, LlamaOptions};

/// The key naming a file's architecture.
pub const ARCHITECTURE_KEY: &str = "general.architecture";

/// The tensor of Llama 3's rope scaling: each frequency's divisor.
pub const ROPE_FREQS: &str = "rope_freqs.weight";

/// The token list, whose length is the vocabulary.
const TOKENS_KEY: &str = "tokenizer.ggml.tokens";

/// The GGUF architectures of the Llama family: the architecture each is, and whether the
/// converter permuted its query and key rows.
const ARCHITECTURES: [(&str, Architecture, bool); 4] = [
    ("llama", Architecture::Llama, true),
    ("mistral", Architecture::Mistral, true),
    ("qwen2", Architecture::Qwen2, false),
    ("qwen3", Architecture::Qwen3, false),
];

/// A GGUF file's model as a Llama-family [`Gpt`](crate::Gpt): its configuration, and how its
/// tensors fill the model's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaLayout {
    /// The model's configuration; its context is `{arch}.context_length`, its head tied
    /// where the file has no `output.weight`.
    pub config: LlamaConfig,
    /// True where the query and key rows are stored permuted (`llama`, `mistral`).
    pub permuted: bool,
}

impl LlamaLayout {
    /// Reads the configuration of the Llama-family model in `file`: `general.architecture`
    /// `llama`, `mistral`, `qwen2` or `qwen3` (any other is refused, naming it), the shape from
    /// the `{arch}.*` keys, the vocabulary from the token list, Llama 3's rope scaling from
    /// `rope_freqs.weight` where there is one. A missing or impossible value is
    /// [`Error::Gguf`](crate::Error::Gguf) naming its key.
    pub fn read(file: &GgufFile) -> Result<Self> {
        let arch = file.get_str(ARCHITECTURE_KEY)?;
        let &(_, architecture, permuted) = ARCHITECTURES
            .iter()
            .find(|(name, ..)| *name == arch)
            .ok_or_else(|| {
                file.error(
                    key_item(ARCHITECTURE_KEY),
                    format!(
                        "{arch:?} is not an architecture of Headroom's Llama family (llama, \
                         mistral, qwen2, qwen3)"
                    ),
                )
            })?;
        let key = |name: &str| format!("{arch}.{name}");
        let size = |name: &str| -> Result<usize> {
            let value = file.get_u64(&key(name))?;
            usize::try_from(value)
                .map_err(|_| file.error(key_item(&key(name)), format!("{value} is too large")))
        };
        let optional = |name: &str| file.get(&key(name)).is_some();
        refuse_unsupported(file, arch)?;
        let (width, heads) = (size("embedding_length")?, size("attention.head_count")?);
        let kv_heads = match optional("attention.head_count_kv") {
            true => size("attention.head_count_kv")?,
            false => heads,
        };
        let head_dim = match optional("attention.key_length") {
            true => size("attention.key_length")?,
            false => width.checked_div(heads).unwrap_or(0),
        };
        for (name, what) in [
            ("attention.value_length", "values"),
            ("rope.dimension_count", "rotated features"),
        ] {
            if optional(name) && size(name)? != head_dim {
                let detail = format!(
                    "{} {what} a head, where its keys have {head_dim}: not computed here",
                    size(name)?
                );
                return Err(file.error(key_item(&key(name)), detail));
            }
        }
        let rope_theta = match optional("rope.freq_base") {
            true => decimal(file, &key("rope.freq_base"))?,
            false => 10_000.0,
        };
        let options = LlamaOptions {
            kv_heads,
            head_dim,
            mlp_width: size("feed_forward_length")?,
            rope_theta,
            rope_scaling: rope_scaling(file, head_dim, rope_theta)?,
            norm_eps: decimal(file, &key("attention.layer_norm_rms_epsilon"))?,
            qkv_bias: architecture == Architecture::Qwen2,
            qk_norm: architecture == Architecture::Qwen3,
        };
        let vocab_size = match file.get(TOKENS_KEY) {
            Some(_) => file.get_array(TOKENS_KEY)?.len(),
            None => size("vocab_size")?,
        };
        let token_id = |name: &str| match file.get(name) {
            Some(_) => file.get_u64(name).map(Some),
            None => Ok(None),
        };
        let config = LlamaConfig {
            architecture,
            vocab_size,
            max_position_embeddings: size("context_length")?,
            hidden_size: width,
            num_hidden_layers: size("block_count")?,
            num_attention_heads: heads,
            options,
            tie_word_embeddings: file.tensor("output.weight").is_none(),
            bos_token_id: token_id("tokenizer.ggml.bos_token_id")?,
            eos_token_ids: token_id("tokenizer.ggml.eos_token_id")?
                .into_iter()
                .collect(),
            torch_dtype: None,
        };
        if let Some((field, detail)) = config.gpt_config(0.0).problems().into_iter().next() {
            return Err(file.error(key_item(&field_key(arch, field)), detail));
        }
        Ok(Self { config, permuted })
    }

    /// The file's key that holds the [`GptConfig`](crate::GptConfig) field `field`, for
    /// messages (`llama.block_count` for `layers`); the head's tying is the presence of
    /// `output.weight`.
    pub fn key(&self, field: &str) -> String {
        let arch = ARCHITECTURES
            .iter()
            .find(|(_, architecture, _)| *architecture == self.config.architecture)
            .map_or("llama", |(name, ..)| name);
        field_key(arch, field)
    }

    /// The file's tensors that fill the model's parameter `name` (Headroom's name,
    /// `blocks.0.attn.qkv.weight`), stacked along the first axis in this order; none when the
    /// family has no such parameter.
    pub fn tensor_names(&self, name: &str) -> Option<Vec<String>> {
        gguf_names(name)
    }

    /// Writes the values of the model's parameter `name` into `out`, which holds exactly as
    /// many: its tensors dequantized one after the other (the fused `attn.qkv` stacks the
    /// query, key and value rows), the query and key rows put back in transformers' order
    /// where the file permuted them. A missing tensor, or one of another size, is
    /// [`Error::Gguf`](crate::Error::Gguf) naming it.
    pub fn read_parameter(&self, file: &GgufFile, name: &str, out: &mut [f32]) -> Result<()> {
        let tensors = self.tensor_names(name).ok_or_else(|| {
            file.error(
                format!("parameter `{name}`"),
                "not a parameter of the Llama family".into(),
            )
        })?;
        let options = &self.config.options;
        let qkv = name.contains("attn.qkv.");
        let heads = [
            self.config.num_attention_heads,
            options.kv_heads,
            options.kv_heads,
        ];
        let mut at = 0;
        for (part, tensor) in tensors.iter().enumerate() {
            let info = file.tensor(tensor).ok_or_else(|| {
                file.error(
                    tensor_item(tensor),
                    format!("missing, where the parameter `{name}` needs it"),
                )
            })?;
            let size = info.n_elements();
            // A part of the fused q/k/v has its heads' rows: the permutation moves them.
            let rows_wanted = heads[part.min(2)] * options.head_dim;
            let fits = !qkv || info.shape().first() == Some(&rows_wanted);
            let Some(place) = out.get_mut(at..at + size).filter(|_| fits) else {
                return Err(file.error(
                    tensor_item(tensor),
                    format!(
                        "shape {:?} does not fit the {} values of `{name}` after {at}",
                        info.shape(),
                        out.len()
                    ),
                ));
            };
            file.read_f32_into(tensor, place)?;
            at += size;
            if qkv && part < 2 && self.permuted {
                let row_len = size / rows_wanted;
                let back = unpermute_rows(place, heads[part], row_len).ok_or_else(|| {
                    file.error(
                        tensor_item(tensor),
                        format!("its rows do not split into {} heads of pairs", heads[part]),
                    )
                })?;
                place.copy_from_slice(&back);
            }
        }
        if at != out.len() {
            return Err(file.error(
                format!("parameter `{name}`"),
                format!("{tensors:?} hold {at} values, where it has {}", out.len()),
            ));
        }
        Ok(())
    }
}

/// The key of a file of architecture `arch` that holds the [`GptConfig`](crate::GptConfig)
/// field `field`; `field` itself where no key holds it.
fn field_key(arch: &str, field: &str) -> String {
    let key = |name: &str| format!("{arch}.{name}");
    match field {
        "vocab" => TOKENS_KEY.to_owned(),
        "context" | "max_positions" => key("context_length"),
        "width" => key("embedding_length"),
        "heads" => key("attention.head_count"),
        "layers" => key("block_count"),
        "kv_heads" => key("attention.head_count_kv"),
        "head_dim" => key("attention.key_length"),
        "mlp_width" => key("feed_forward_length"),
        "rope_theta" => key("rope.freq_base"),
        "norm_eps" => key("attention.layer_norm_rms_epsilon"),
        "family" => ARCHITECTURE_KEY.to_owned(),
        "tie_embeddings" => "output.weight (absent where the head is tied)".to_owned(),
        other => other.to_owned(),
    }
}

/// The number of `key`; an f32 as the decimal it was written from, the shortest that reads
/// back as it (the converter writes `rms_norm_eps` 1e-6 as the f32 nearest, which is
/// 9.99999997e-7 as an f64).
fn decimal(file: &GgufFile, key: &str) -> Result<f64> {
    match file.get(key) {
        Some(Value::F32(v)) => Ok(v.to_string().parse().unwrap_or(f64::from(*v))),
        _ => file.get_f64(key),
    }
}

/// Errors for what the file's keys ask that Headroom does not compute.
fn refuse_unsupported(file: &GgufFile, arch: &str) -> Result<()> {
    let key = |name: &str| format!("{arch}.{name}");
    let scaling = key("rope.scaling.type");
    if file.get(&scaling).is_some() {
        let kind = file.get_str(&scaling)?;
        if kind != "none" {
            let detail = format!(
                "{kind:?} rope scaling is not computed here (only none, or Llama 3's from \
                 rope_freqs.weight)"
            );
            return Err(file.error(key_item(&scaling), detail));
        }
    }
    let experts = key("expert_count");
    if file.get(&experts).is_some() && file.get_u64(&experts)? > 0 {
        let detail = "a mixture of experts, which the Llama family here is not".to_owned();
        return Err(file.error(key_item(&experts), detail));
    }
    let window = key("attention.sliding_window");
    if file.get(&window).is_some() {
        let detail = "sliding-window attention is not computed here".to_owned();
        return Err(file.error(key_item(&window), detail));
    }
    Ok(())
}

/// Llama 3's rope scaling that `rope_freqs.weight` holds as llama.cpp's converter writes it
/// (each frequency divided by its factor), or none where the file has no such tensor. The
/// factor is the largest; the low and high frequency factors are Llama 3's 1 and 4; the
/// original context is found from a factor between the two ends (8192, Llama 3's, where every
/// frequency is at an end and it gives the same factors). Factors that no such scaling gives
/// are an error naming the tensor.
fn rope_scaling(file: &GgufFile, head_dim: usize, theta: f64) -> Result<Option<Llama3Scaling>> {
    if file.tensor(ROPE_FREQS).is_none() {
        return Ok(None);
    }
    let factors = file.read_f32(ROPE_FREQS)?;
    let err = |detail: String| file.error(tensor_item(ROPE_FREQS), detail);
    let plain = inv_freq(head_dim, theta, None).map_err(|e| err(e.to_string()))?;
    if factors.len() != plain.len() {
        return Err(err(format!(
            "{} factors, where heads of {head_dim} features rotate {} pairs",
            factors.len(),
            plain.len()
        )));
    }
    if factors.iter().all(|&f| f == 1.0) {
        return Ok(None);
    }
    let factors: Vec<f64> = factors.into_iter().map(f64::from).collect();
    let factor = factors.iter().copied().fold(f64::MIN, f64::max);
    let (low, high) = (1.0, 4.0);
    let wavelen = |i: usize| 2.0 * PI / plain[i];
    let context = match factors.iter().position(|&f| f > 1.0 && f < factor) {
        // Between the ends, 1/f = (1 - s)/factor + s with s = (context/wavelen - low) /
        // (high - low).
        Some(i) => {
            let f = factors[i];
            let smooth = (1.0 / f - 1.0 / factor) / (1.0 - 1.0 / factor);
            (wavelen(i) * (smooth * (high - low) + low)).round()
        }
        // Any context above `high` times the longest kept wavelength and below the shortest
        // divided one gives these factors.
        None => {
            let (mut above, mut below) = (0.0f64, f64::INFINITY);
            for (i, &f) in factors.iter().enumerate() {
                match f == 1.0 {
                    true => above = above.max(wavelen(i) * high),
                    false => below = below.min(wavelen(i) * low),
                }
            }
            match above < 8192.0 && 8192.0 < below {
                true => 8192.0,
                false => above.floor() + 1.0,
            }
        }
    };
    let scaling = Llama3Scaling {
        factor,
        low_freq_factor: low,
        high_freq_factor: high,
        original_max_position_embeddings: context as usize,
    };
    let scaled = inv_freq(head_dim, theta, Some(scaling)).map_err(|e| err(e.to_string()))?;
    // The converter computes the factors in f32.
    let off = plain
        .iter()
        .zip(&factors)
        .zip(&scaled)
        .any(|((p, f), s)| ((p / f) - s).abs() > 1e-4 * s);
    if off {
        return Err(err(format!(
            "factors {factors:?} that Llama 3's rope scaling does not give (the closest: \
             {scaling:?})"
        )));
    }
    Ok(Some(scaling))
}

/// Moves the rows of a query or key projection (or its bias) as llama.cpp's converter does
/// for `llama` models (`permute` in `convert_hf_to_gguf.py`): within each of `heads` heads of
/// `2 * half` rows, row `j * half + i` (the two halves transformers rotates together) goes to
/// row `2 * i + j`. `values` are whole rows of `row_len`; none when the rows do not split into
/// `heads` heads of an even number of rows.
pub fn permute_rows(values: &[f32], heads: usize, row_len: usize) -> Option<Vec<f32>> {
    reorder(values, heads, row_len, true)
}

/// The inverse of [`permute_rows`]: a GGUF file's query or key rows back in transformers'
/// order (transformers' `reverse_permute` of GGUF checkpoints).
pub fn unpermute_rows(values: &[f32], heads: usize, row_len: usize) -> Option<Vec<f32>> {
    reorder(values, heads, row_len, false)
}

/// [`permute_rows`] (`to_gguf`) or its inverse.
fn reorder(values: &[f32], heads: usize, row_len: usize, to_gguf: bool) -> Option<Vec<f32>> {
    let rows = values.len().checked_div(row_len)?;
    let per_head = rows.checked_div(heads)?;
    if rows * row_len != values.len() || per_head * heads != rows || per_head % 2 != 0 {
        return None;
    }
    let half = per_head / 2;
    let mut out = vec![0.0; values.len()];
    for head in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                let hf = head * per_head + j * half + i;
                let gguf = head * per_head + 2 * i + j;
                let (from, to) = match to_gguf {
                    true => (hf, gguf),
                    false => (gguf, hf),
                };
                out[to * row_len..(to + 1) * row_len]
                    .copy_from_slice(&values[from * row_len..(from + 1) * row_len]);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permuting_pairs_each_heads_halves_and_unpermuting_undoes_it() {
        // Two heads of four rows of length 2: rows [a0 a1 b0 b1] become [a0 b0 a1 b1].
        let values: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let permuted = permute_rows(&values, 2, 2).unwrap();
        let rows: Vec<f32> = permuted.chunks(2).map(|r| r[0] / 2.0).collect();
        assert_eq!(rows, [0.0, 2.0, 1.0, 3.0, 4.0, 6.0, 5.0, 7.0]);
        assert_eq!(unpermute_rows(&permuted, 2, 2).unwrap(), values);
        // Larger heads, and a bias (rows of one).
        let values: Vec<f32> = (0..3 * 8 * 5).map(|v| v as f32).collect();
        for (heads, row_len) in [(3, 5), (1, 15), (6, 5), (4, 5), (4, 1)] {
            let there = permute_rows(&values, heads, row_len).unwrap();
            assert_ne!(there, values);
            assert_eq!(unpermute_rows(&there, heads, row_len).unwrap(), values);
        }
        // Heads of two rows are one pair each: nothing moves.
        assert_eq!(permute_rows(&values, 12, 5).unwrap(), values);
        assert_eq!(permute_rows(&values, 7, 3), None);
        assert_eq!(permute_rows(&values, 0, 3), None);
        assert_eq!(permute_rows(&values, 1, 7), None);
    }

    /// A qwen3 file's keys, with `changes` put in (replacing a key of the same name) and no
    /// tensors.
    fn qwen3_with(changes: &[(&str, Value)]) -> GgufFile {
        let mut metadata = vec![
            ("general.architecture", Value::String("qwen3".into())),
            ("qwen3.block_count", Value::U32(2)),
            ("qwen3.context_length", Value::U32(64)),
            ("qwen3.embedding_length", Value::U32(32)),
            ("qwen3.feed_forward_length", Value::U32(48)),
            ("qwen3.attention.head_count", Value::U32(4)),
            ("qwen3.attention.head_count_kv", Value::U32(2)),
            ("qwen3.attention.key_length", Value::U32(16)),
            ("qwen3.rope.freq_base", Value::F32(1e6)),
            ("qwen3.attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
            ("qwen3.vocab_size", Value::U64(320)),
        ];
        for (key, value) in changes {
            metadata.retain(|(k, _)| k != key);
            metadata.push((key, value.clone()));
        }
        let bytes = crate::gguf::test_writer::gguf_bytes(&metadata, &[]);
        GgufFile::from_bytes("qwen3.gguf", bytes).unwrap()
    }

    fn refusal(changes: &[(&str, Value)]) -> String {
        LlamaLayout::read(&qwen3_with(changes))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn keys_make_the_configuration() {
        let layout = LlamaLayout::read(&qwen3_with(&[])).unwrap();
        let config = &layout.config;
        assert_eq!(config.architecture, Architecture::Qwen3);
        assert!(!layout.permuted && config.tie_word_embeddings);
        assert_eq!(
            (config.vocab_size, config.max_position_embeddings),
            (320, 64)
        );
        let o = &config.options;
        assert_eq!((o.kv_heads, o.head_dim, o.mlp_width), (2, 16, 48));
        // f32 keys read as the decimals they were written from.
        assert_eq!((o.rope_theta, o.norm_eps), (1e6, 1e-6));
        assert!(o.qk_norm && !o.qkv_bias);
        let layout = LlamaLayout::read(&qwen3_with(&[
            ("general.architecture", Value::String("llama".into())),
            ("llama.block_count", Value::U32(2)),
            ("llama.context_length", Value::U32(64)),
            ("llama.embedding_length", Value::U32(32)),
            ("llama.feed_forward_length", Value::U32(48)),
            ("llama.attention.head_count", Value::U32(4)),
            ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
            ("llama.vocab_size", Value::U32(320)),
        ]))
        .unwrap();
        // Defaults: a key and value head per query head, width / heads features, base 10 000.
        let o = &layout.config.options;
        assert_eq!((o.kv_heads, o.head_dim, o.rope_theta), (4, 8, 10_000.0));
        assert!(layout.permuted && !o.qk_norm);
    }

    #[test]
    fn what_headroom_does_not_compute_is_refused_naming_the_key() {
        for (changes, says) in [
            (
                vec![("general.architecture", Value::String("gemma3".into()))],
                "key `general.architecture`: \"gemma3\" is not",
            ),
            (
                vec![("qwen3.rope.scaling.type", Value::String("yarn".into()))],
                "key `qwen3.rope.scaling.type`: \"yarn\" rope scaling",
            ),
            (
                vec![("qwen3.expert_count", Value::U32(8))],
                "key `qwen3.expert_count`: a mixture of experts",
            ),
            (
                vec![("qwen3.attention.value_length", Value::U32(8))],
                "key `qwen3.attention.value_length`: 8 values a head",
            ),
            (
                vec![("qwen3.rope.dimension_count", Value::U32(8))],
                "key `qwen3.rope.dimension_count`: 8 rotated features",
            ),
            (
                vec![("qwen3.attention.sliding_window", Value::U32(4096))],
                "key `qwen3.attention.sliding_window`",
            ),
            (
                vec![("qwen3.attention.head_count_kv", Value::U32(3))],
                "key `qwen3.attention.head_count_kv`: 3 key/value heads do not divide",
            ),
            (
                vec![("qwen3.block_count", Value::U32(0))],
                "key `qwen3.block_count`: 0, where",
            ),
            (
                vec![("qwen3.block_count", Value::I32(-2))],
                "key `qwen3.block_count`: the i32 -2 where an integer of at least 0",
            ),
            (
                vec![("qwen3.context_length", Value::String("64".into()))],
                "key `qwen3.context_length`",
            ),
            (
                vec![("qwen3.attention.layer_norm_rms_epsilon", Value::F32(-1.0))],
                "key `qwen3.attention.layer_norm_rms_epsilon`: -1",
            ),
        ] {
            let err = refusal(&changes);
            assert!(
                err.contains("GGUF qwen3.gguf: ") && err.contains(says),
                "{err}"
            );
        }
        let file = qwen3_with(&[]);
        let mut bytes = Vec::new();
        for (key, value) in file.metadata() {
            if key != "qwen3.vocab_size" {
                bytes.push((key, value.clone()));
            }
        }
        let bytes = crate::gguf::test_writer::gguf_bytes(&bytes, &[]);
        let file = GgufFile::from_bytes("qwen3.gguf", bytes).unwrap();
        let err = LlamaLayout::read(&file).unwrap_err().to_string();
        assert!(
            err.contains("key `qwen3.vocab_size`: not in the file"),
            "{err}"
        );
    }

    #[test]
    fn llama3_factors_give_back_their_scaling() {
        // Llama 3.1 8B and Llama 3.2 1B: heads of 128 and 64, base 500 000.
        for (head_dim, factor) in [(128, 8.0), (64, 32.0)] {
            let scaling = Llama3Scaling {
                factor,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192,
            };
            let plain = inv_freq(head_dim, 500_000.0, None).unwrap();
            let scaled = inv_freq(head_dim, 500_000.0, Some(scaling)).unwrap();
            let factors: Vec<f32> = plain
                .iter()
                .zip(&scaled)
                .map(|(p, s)| (p / s) as f32)
                .collect();
            let file = crate::gguf::test_writer::file_with_tensor(ROPE_FREQS, &factors);
            assert_eq!(
                rope_scaling(&file, head_dim, 500_000.0).unwrap(),
                Some(scaling)
            );
            // Off by one factor: refused, naming the tensor.
            let mut off = factors.clone();
            off[head_dim / 4] *= 1.5;
            let file = crate::gguf::test_writer::file_with_tensor(ROPE_FREQS, &off);
            let err = rope_scaling(&file, head_dim, 500_000.0)
                .unwrap_err()
                .to_string();
            assert!(err.contains("tensor `rope_freqs.weight`"), "{err}");
        }
    }
}
