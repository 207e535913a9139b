//! Writing a Llama-family [`Gpt`] as a GGUF file that llama.cpp (and Ollama) runs, laid out as
//! llama.cpp's converter lays out the Hugging Face model [`export_llama`](crate::hf::export_llama)
//! writes, so that [`LlamaLayout`](super::LlamaLayout) reads it back as the same model.

use std::f64::consts::PI;
use std::ops::Range;
use std::path::Path;

use headroom_autograd::Tensor;
use headroom_kernels::DType;
use headroom_kernels::ops::layout::narrow;
use headroom_kernels::ops::rotary::Llama3Scaling;

use super::export_types::GgufQuant;
use super::llama_layout::{ARCHITECTURE_KEY, ROPE_FREQS, permute_rows};
use super::{GgufType, GgufWriter, TensorEntry, Value};
use crate::decoder::Gpt;
use crate::error::{Error, Result};
use crate::models::Family;
use crate::models::llama::names::gguf_names;
use crate::models::llama::{Architecture, LlamaConfig};

/// `general.quantization_version`: ggml's `GGML_QNT_VERSION`, the block layouts' version.
const QUANTIZATION_VERSION: u32 = 2;

/// What errors of the export name.
const WHAT: &str = "GGUF export";

/// How [`export_llama_gguf`] writes a model.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufExport {
    /// The matrices' quantization.
    pub quant: GgufQuant,
    /// `general.name`.
    pub name: String,
    /// The tokenizer's `tokenizer.*` keys
    /// ([`GgufTokenizer::metadata`](super::GgufTokenizer)); its token list must have the
    /// model's vocabulary.
    pub tokenizer: Vec<(String, Value)>,
    /// Replace a file already at the path instead of refusing to.
    pub overwrite: bool,
}

/// What [`export_llama_gguf`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufExported {
    /// llama.cpp's architecture: `llama`, `qwen2` or `qwen3`.
    pub architecture: &'static str,
    /// Each tensor's name, shape and type, in file order.
    pub tensors: Vec<TensorEntry>,
    /// The file's size in bytes.
    pub bytes: u64,
}

/// One tensor of the file: rows of one parameter (or the rope factors).
struct Source {
    /// The parameter, none for `rope_freqs.weight`.
    param: Option<Tensor>,
    /// Which of its rows.
    rows: Range<usize>,
    /// The heads whose rows llama.cpp's converter permutes (a `llama` file's queries and keys).
    permute_heads: Option<usize>,
}

/// Writes the Llama-family `gpt` at `path` as a GGUF file of llama.cpp's architecture for it
/// (the class [`export_llama`](crate::hf::export_llama) picks: `qwen3` for query/key norms,
/// `qwen2` for q/k/v biases, `llama` otherwise, a Mistral model included), as llama.cpp's
/// converter writes one:
///
/// - `general.architecture`, `general.name`, `general.file_type`,
///   `general.quantization_version`; the `{arch}.*` keys (`block_count`, `context_length`,
///   `embedding_length`, `feed_forward_length`, `attention.head_count`, `head_count_kv`,
///   `key_length`, `value_length`, `rope.freq_base`, `attention.layer_norm_rms_epsilon`, and
///   for `llama` `vocab_size` and `rope.dimension_count`); then `options.tokenizer`.
/// - the tensors under llama.cpp's names, the fused `attn.qkv` split into `attn_q`, `attn_k`,
///   `attn_v`, a `llama` file's query and key rows permuted ([`permute_rows`]), no
///   `output.weight` where the head is tied, Llama 3's rope scaling as the
///   `rope_freqs.weight` factors; each in the type [`GgufQuant::tensor_type`] gives it.
///
/// One tensor at a time is read to the host as f32 and written; the file is written
/// atomically, its directory created where it is missing. A model [`architecture`] refuses,
/// a token list of another length than the vocabulary, and a file at `path` without
/// `overwrite` are an [`Error::Config`], found before anything is written.
pub fn export_llama_gguf(gpt: &Gpt, path: &Path, options: &GgufExport) -> Result<GgufExported> {
    let (arch, llama) = architecture(gpt)?;
    let permuted = arch == "llama";
    let refuse = |detail: String| Err(Error::config(WHAT, detail));
    let config = gpt.config();
    let o = &llama.options;
    if path.exists() && !options.overwrite {
        return refuse(format!(
            "{} already exists: set overwrite to replace it",
            path.display()
        ));
    }
    let mut writer = GgufWriter::new();
    let u32_of = |name: &str, n: usize| {
        u32::try_from(n)
            .map(Value::U32)
            .map_err(|_| Error::config(WHAT, format!("{name} {n} does not fit a u32")))
    };
    let mut keys = vec![
        (ARCHITECTURE_KEY.to_owned(), Value::String(arch.into())),
        ("general.name".into(), Value::String(options.name.clone())),
        (
            "general.file_type".into(),
            Value::U32(options.quant.file_type()),
        ),
        (
            "general.quantization_version".into(),
            Value::U32(QUANTIZATION_VERSION),
        ),
    ];
    let arch_key = |name: &str| format!("{arch}.{name}");
    for (name, n) in [
        ("block_count", config.layers),
        ("context_length", config.context),
        ("embedding_length", config.width),
        ("feed_forward_length", o.mlp_width),
        ("attention.head_count", config.heads),
        ("attention.head_count_kv", o.kv_heads),
        ("attention.key_length", o.head_dim),
        ("attention.value_length", o.head_dim),
    ] {
        keys.push((arch_key(name), u32_of(name, n)?));
    }
    keys.push((arch_key("rope.freq_base"), Value::F32(o.rope_theta as f32)));
    keys.push((
        arch_key("attention.layer_norm_rms_epsilon"),
        Value::F32(o.norm_eps as f32),
    ));
    if permuted {
        keys.push((arch_key("vocab_size"), u32_of("vocab_size", config.vocab)?));
        keys.push((
            arch_key("rope.dimension_count"),
            u32_of("head_dim", o.head_dim)?,
        ));
    }
    let tokens = options
        .tokenizer
        .iter()
        .find(|(k, _)| k == "tokenizer.ggml.tokens")
        .and_then(|(_, v)| v.as_array())
        .map(<[Value]>::len);
    if tokens != Some(config.vocab) {
        return refuse(format!(
            "the tokenizer lists {} tokens, where the model has {}",
            tokens.map_or("no".into(), |n| n.to_string()),
            config.vocab
        ));
    }
    keys.extend(options.tokenizer.iter().cloned());
    for (key, value) in keys {
        writer.set(key, value)?;
    }
    let mut sources = Vec::new();
    let factors = o
        .rope_scaling
        .map(|s| rope_factors(o.head_dim, o.rope_theta, s));
    if let Some(factors) = &factors {
        writer.add_tensor(ROPE_FREQS, &[factors.len()], GgufType::F32)?;
        sources.push(Source {
            param: None,
            rows: 0..factors.len(),
            permute_heads: None,
        });
    }
    let (q, kv) = (config.heads * o.head_dim, o.kv_heads * o.head_dim);
    for (name, param) in crate::lora::base_tensors(gpt) {
        let names = gguf_names(&name).ok_or_else(|| {
            Error::config(
                WHAT,
                format!("the Llama family has no GGUF tensor for `{name}`"),
            )
        })?;
        let dims = param.shape().dims().to_vec();
        let parts: Vec<(Range<usize>, Option<usize>)> = match names.len() {
            3 => vec![
                (0..q, permuted.then_some(config.heads)),
                (q..q + kv, permuted.then_some(o.kv_heads)),
                (q + kv..q + 2 * kv, None),
            ],
            _ => vec![(0..dims.first().copied().unwrap_or(1), None)],
        };
        for (gguf, (rows, permute_heads)) in names.into_iter().zip(parts) {
            let mut shape = dims.clone();
            if let Some(first) = shape.first_mut() {
                *first = rows.len();
            }
            let ty = options.quant.tensor_type(&gguf, &shape);
            writer.add_tensor(gguf, &shape, ty)?;
            sources.push(Source {
                param: Some(param.clone()),
                rows,
                permute_heads,
            });
        }
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_owned(),
            source,
        })?;
    }
    // The writer asks for the tensors in the order they were added.
    let mut next = sources.iter();
    let bytes = writer.write(path, |entry| {
        let source = next
            .next()
            .ok_or_else(|| Error::config(WHAT, format!("no values for `{}`", entry.name())))?;
        let Some(param) = &source.param else {
            return Ok(factors.clone().unwrap_or_default());
        };
        let values = host_f32(param, source.rows.clone())?;
        match source.permute_heads {
            None => Ok(values),
            Some(heads) => permute_rows(&values, heads, entry.row_len()).ok_or_else(|| {
                Error::config(
                    WHAT,
                    format!(
                        "`{}`'s rows do not split into {heads} heads of pairs",
                        entry.name()
                    ),
                )
            }),
        }
    })?;
    Ok(GgufExported {
        architecture: arch,
        tensors: writer.tensors().to_vec(),
        bytes,
    })
}

/// llama.cpp's architecture for `gpt` (`llama`, `qwen2` or `qwen3`) with its configuration, or
/// the [`Error::Config`] saying why it has no GGUF form here: another family, weights stored
/// quantized (merge the adapters first), both query/key norms and q/k/v biases, or Llama 3's
/// rope scaling on a `qwen2` or `qwen3` model (llama.cpp reads `rope_freqs.weight` only for
/// `llama`).
pub fn architecture(gpt: &Gpt) -> Result<(&'static str, LlamaConfig)> {
    let refuse = |detail: String| Err(Error::config(WHAT, detail));
    let quantized = crate::Module::quantized_count(gpt);
    if quantized > 0 {
        return refuse(format!(
            "{quantized} weights are stored quantized: merge the adapters first"
        ));
    }
    let llama = match gpt.config().family {
        Family::Llama(_) => LlamaConfig::from_gpt(gpt.config(), None, None),
        Family::Gemma3(_) => {
            return refuse(
                "Gemma 3 is not written as GGUF here yet: export it with --hf and convert that \
                 directory with llama.cpp's convert_hf_to_gguf.py"
                    .into(),
            );
        }
        Family::Gpt2 => {
            return refuse(
                "GPT-2 models are not written as GGUF here: export it with --hf and convert \
                 that directory with llama.cpp's convert_hf_to_gguf.py"
                    .into(),
            );
        }
    };
    let Some(llama) = llama else {
        return refuse(
            "the model has both query/key norms (Qwen3) and q/k/v biases (Qwen2), which no \
             llama.cpp architecture has together"
                .into(),
        );
    };
    let arch = match llama.architecture {
        Architecture::Llama | Architecture::Mistral => "llama",
        Architecture::Qwen2 => "qwen2",
        Architecture::Qwen3 => "qwen3",
    };
    if llama.options.rope_scaling.is_some() && arch != "llama" {
        return refuse(format!(
            "Llama 3's rope scaling on a {arch} model: llama.cpp reads rope_freqs.weight only \
             for llama"
        ));
    }
    Ok((arch, llama))
}

/// `rows` of `param` on the host as f32 (only those rows are copied).
fn host_f32(param: &Tensor, rows: Range<usize>) -> Result<Vec<f32>> {
    let array = param.array();
    let whole = array.shape().dims().first() == Some(&rows.len());
    let part = match whole {
        true => array.clone(),
        false => narrow(array, 0, rows.start, rows.len())?,
    };
    let part = match part.dtype() {
        DType::F32 => part,
        _ => part.cast(DType::F32)?,
    };
    Ok(part.to_host::<f32>()?)
}

/// Llama 3's rope scaling as llama.cpp's converter writes it: each rotated pair's frequency
/// divisor (1 for short wavelengths, `factor` for long ones, smoothed between).
fn rope_factors(head_dim: usize, theta: f64, s: Llama3Scaling) -> Vec<f32> {
    let old = s.original_max_position_embeddings as f64;
    let (low_wavelen, high_wavelen) = (old / s.low_freq_factor, old / s.high_freq_factor);
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / theta.powf(2.0 * i as f64 / head_dim as f64);
            let wavelen = 2.0 * PI / freq;
            let factor = if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                s.factor
            } else {
                let smooth =
                    (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                1.0 / ((1.0 - smooth) / s.factor + smooth)
            };
            factor as f32
        })
        .collect()
}
