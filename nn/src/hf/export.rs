//! Writing a [`Gpt`] of a family laid out as Llama's (the Llama family, Gemma 3) as a Hugging
//! Face directory.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use headroom_autograd::Tensor;
use headroom_kernels::DType;
use headroom_kernels::ops::layout::narrow;
use safetensors::tensor::{Dtype, View};
use serde_json::{Value, json};

use crate::decoder::Gpt;
use crate::error::{Error, Result};
use crate::gguf::LlamaLayout;
use crate::hf::companions::GENERATION_CONFIG;
use crate::hf::pretrained::Pretrained;
use crate::hf::shards::{DEFAULT_SHARD_BYTES, index_json, shard_name, split, weight_files_in};
use crate::hf::weight_files::INDEX_FILE;
use crate::json_fields::write_json;
use crate::models::Family;
use crate::models::gemma3::Gemma3Config;
use crate::models::llama::LlamaConfig;

/// How [`export_llama`] writes a model.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaExport {
    /// The dtype the weights are stored in: f32, bf16 or f16; none keeps each parameter's own.
    pub dtype: Option<DType>,
    /// The largest shard, in bytes: a model of more is written in shards (transformers'
    /// `max_shard_size`, by default "5GB", [`DEFAULT_SHARD_BYTES`]).
    pub shard_bytes: u64,
    /// The beginning-of-sequence token id, if any.
    pub bos: Option<u64>,
    /// The end-of-sequence token id, if any.
    pub eos: Option<u64>,
    /// Replace the weight files the directory already holds (of either layout) instead of
    /// refusing to.
    pub overwrite: bool,
}

impl Default for LlamaExport {
    fn default() -> Self {
        Self {
            dtype: None,
            shard_bytes: DEFAULT_SHARD_BYTES,
            bos: None,
            eos: None,
            overwrite: false,
        }
    }
}

/// One tensor of the checkpoint: rows of one parameter.
struct Entry {
    /// Its published name.
    name: String,
    /// The parameter that holds it.
    param: Tensor,
    /// Which of the parameter's rows.
    rows: Range<usize>,
    /// Its shape.
    dims: Vec<usize>,
    /// The dtype it is stored in.
    dtype: DType,
}

impl Entry {
    /// Its size in the file.
    fn bytes(&self) -> u64 {
        (self.dims.iter().product::<usize>() * self.dtype.size()) as u64
    }
}

/// Writes the Llama-family `gpt` as a Hugging Face directory that transformers'
/// `AutoModelForCausalLM.from_pretrained(dir)` loads as the class its options make it
/// ([`Architecture::of`](crate::hf::Architecture::of): Qwen3 for query/key norms, Qwen2 for
/// q/k/v biases, Llama otherwise: a Mistral model, which Headroom holds without a sliding
/// window, computes the same as a Llama), and [`load_llama`](crate::hf::load_llama) loads bit
/// for bit.
/// Creates `dir` (and its parents) and writes:
///
/// - the weights under the published names, the fused `attn.qkv` split back into `q_proj`,
///   `k_proj` and `v_proj`, `lm_head.weight` only when the head is untied, metadata
///   `{"format": "pt"}`: one `model.safetensors` when they fit in `options.shard_bytes`,
///   otherwise shards `model-00001-of-0000N.safetensors` filled in parameter order and
///   `model.safetensors.index.json`, as transformers writes them. One shard's bytes at most are
///   held on the host at a time.
/// - `generation_config.json` with the token ids, when `options` gives one.
/// - `config.json` ([`LlamaConfig::from_gpt`]), last; its `torch_dtype` is `options.dtype`, or
///   the token embedding's.
///
/// Each file is written atomically (see [`checkpoint`](crate::checkpoint)). Weight files `dir`
/// already holds, of either layout, are an [`Error::Config`] naming them, unless
/// `options.overwrite` is set: then exactly those not written again are removed once the new
/// weights are written. No other file in `dir` is touched.
///
/// A GPT-2-family model, a model with both query/key norms and q/k/v biases (no published
/// architecture has both), a parameter in a dtype other than f32, bf16 or f16 (without
/// `options.dtype`) and `shard_bytes` 0 are an [`Error::Config`], found before any file is
/// written.
pub fn export_llama(gpt: &Gpt, dir: &Path, options: &LlamaExport) -> Result<()> {
    super::check_dense(gpt, "llama export")?;
    let (bos, eos) = (options.bos, options.eos);
    let config = match gpt.config().family {
        Family::Llama(_) => LlamaConfig::from_gpt(gpt.config(), bos, eos).map(Pretrained::Llama),
        Family::Gemma3(_) => Gemma3Config::from_gpt(gpt.config(), bos, eos).map(Pretrained::Gemma3),
        Family::Gpt2 => None,
    }
    .ok_or_else(|| not_exportable(gpt))?;
    if options.shard_bytes == 0 {
        return Err(Error::config(
            "llama export",
            "shard_bytes is 0: a shard holds at least one tensor",
        ));
    }
    let entries = entries(gpt, options.dtype)?;
    let existing = weight_files_in(dir)?;
    if !existing.is_empty() && !options.overwrite {
        let detail = format!(
            "{} already holds {}: set overwrite to replace them",
            dir.display(),
            existing.join(", ")
        );
        return Err(Error::config("llama export", detail));
    }
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_owned(),
        source,
    })?;
    let written = write_weights(dir, &entries, options.shard_bytes)?;
    for stale in existing.iter().filter(|name| !written.contains(name)) {
        let path = dir.join(stale);
        std::fs::remove_file(&path).map_err(|source| Error::Io { path, source })?;
    }
    if options.bos.is_some() || options.eos.is_some() {
        let generation = json!({"bos_token_id": options.bos, "eos_token_id": options.eos});
        write_json(&dir.join(GENERATION_CONFIG), &without_nulls(generation))?;
    }
    let dtype = options
        .dtype
        .or_else(|| entries.first().map(|e| e.dtype))
        .unwrap_or(DType::F32);
    match config {
        Pretrained::Llama(config) | Pretrained::Gguf(LlamaLayout { config, .. }) => {
            config.write(dir, torch_dtype(dtype)?.1)
        }
        Pretrained::Gemma3(config) => config.write(dir, torch_dtype(dtype)?.1),
        Pretrained::Gpt2(config) => config.write(dir),
    }
}

/// The error for a model no Llama-family architecture holds.
fn not_exportable(gpt: &Gpt) -> Error {
    let detail = match gpt.config().family {
        Family::Llama(_) => {
            "the model has both query/key norms (Qwen3) and q/k/v biases (Qwen2), which no \
             Llama-family architecture has together"
        }
        _ => "the model is of GPT-2's family: export it with export_gpt2",
    };
    Error::config("llama export", detail)
}

/// The checkpoint's tensors, in parameter order.
fn entries(gpt: &Gpt, dtype: Option<DType>) -> Result<Vec<Entry>> {
    let config = gpt.config();
    let (q, kv) = (
        config.heads * config.head_dim(),
        config.kv_heads() * config.head_dim(),
    );
    let mut entries = Vec::new();
    for (name, param) in crate::lora::base_tensors(gpt) {
        let names = config.family.hf_names(&name).ok_or_else(|| {
            Error::config(
                "llama export",
                format!("the model's family has no tensor for `{name}`"),
            )
        })?;
        let dims = param.shape().dims().to_vec();
        let rows: Vec<Range<usize>> = match names.len() {
            3 => vec![0..q, q..q + kv, q + kv..q + 2 * kv],
            _ => std::iter::once(0..dims[0]).collect(),
        };
        let dtype = dtype.unwrap_or(param.dtype());
        torch_dtype(dtype)?;
        for (hf, rows) in names.into_iter().zip(rows) {
            let mut dims = dims.clone();
            dims[0] = rows.len();
            entries.push(Entry {
                name: hf,
                param: param.clone(),
                rows,
                dims,
                dtype,
            });
        }
    }
    Ok(entries)
}

/// The safetensors dtype and transformers' `torch_dtype` name of `dtype`, which must be f32,
/// bf16 or f16.
fn torch_dtype(dtype: DType) -> Result<(Dtype, &'static str)> {
    match dtype {
        DType::F32 => Ok((Dtype::F32, "float32")),
        DType::BF16 => Ok((Dtype::BF16, "bfloat16")),
        DType::F16 => Ok((Dtype::F16, "float16")),
        other => Err(Error::config(
            "llama export",
            format!("weights are stored in f32, bf16 or f16, not {other}"),
        )),
    }
}

/// Writes the entries as one file or as shards and an index; returns the files' names.
fn write_weights(dir: &Path, entries: &[Entry], shard_bytes: u64) -> Result<Vec<String>> {
    let sizes: Vec<u64> = entries.iter().map(Entry::bytes).collect();
    let shards = split(&sizes, shard_bytes);
    if shards.len() <= 1 {
        write_shard(&dir.join(super::WEIGHTS_FILE), entries)?;
        return Ok(vec![super::WEIGHTS_FILE.to_owned()]);
    }
    let names: Vec<String> = (0..shards.len())
        .map(|i| shard_name(i, shards.len()))
        .collect();
    for (shard, name) in shards.iter().zip(&names) {
        write_shard(&dir.join(name), &entries[shard.clone()])?;
    }
    let map = shards.iter().zip(&names).flat_map(|(shard, file)| {
        entries[shard.clone()]
            .iter()
            .map(|e| (e.name.as_str(), file.as_str()))
    });
    write_json(&dir.join(INDEX_FILE), &index_json(sizes.iter().sum(), map))?;
    let mut written = names;
    written.push(INDEX_FILE.to_owned());
    Ok(written)
}

/// A tensor's bytes on the host, ready to write.
struct Bytes {
    dtype: Dtype,
    dims: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Bytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.dims
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// Writes `entries` as one safetensors file at `path`, atomically, holding their bytes (and no
/// other copy of them) meanwhile.
fn write_shard(path: &Path, entries: &[Entry]) -> Result<()> {
    let tensors = entries
        .iter()
        .map(|e| Ok((e.name.as_str(), host_bytes(e)?)))
        .collect::<Result<Vec<_>>>()?;
    let metadata = HashMap::from([("format".to_owned(), "pt".to_owned())]);
    crate::checkpoint::write_atomically_with(path, |temporary| {
        let views = tensors.iter().map(|(name, bytes)| (*name, bytes));
        safetensors::tensor::serialize_to_file(views, Some(metadata), temporary)
            .map_err(std::io::Error::other)
    })
}

/// The entry's rows of its parameter, in its dtype, on the host: only those rows are copied
/// (a part of the fused q/k/v projection is narrowed on the device first).
fn host_bytes(entry: &Entry) -> Result<Bytes> {
    let array = entry.param.array();
    let rows = match entry.rows.len() == array.shape().dims()[0] {
        true => array.clone(),
        false => narrow(array, 0, entry.rows.start, entry.rows.len())?,
    };
    let data = match rows.dtype() == entry.dtype {
        true => rows.to_bytes()?,
        false => rows.cast(entry.dtype)?.to_bytes()?,
    };
    Ok(Bytes {
        dtype: torch_dtype(entry.dtype)?.0,
        dims: entry.dims.clone(),
        data,
    })
}

/// `value` without its null fields.
fn without_nulls(mut value: Value) -> Value {
    if let Some(map) = value.as_object_mut() {
        map.retain(|_, v| !v.is_null());
    }
    value
}
