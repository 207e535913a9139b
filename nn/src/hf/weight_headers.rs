//! A pretrained model directory's weight files checked from their headers alone, before a
//! model is planned or built: each file a whole safetensors file (its header parses, and the
//! file is as long as the header's tensors need), and its tensors the ones, of the shapes, that
//! the model its `config.json` describes takes. No tensor's data is read, so a truncated copy of
//! a model of gigabytes is refused in milliseconds.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use headroom_kernels::{DType, Device, DeviceConfig, Shape};
use safetensors::tensor::{Metadata, TensorInfo};

use crate::decoder::Gpt;
use crate::error::{Error, Result};
use crate::hf::peft::{ADAPTER_WEIGHTS, PeftAdapter};
use crate::hf::pretrained::{Pretrained, adapter_base};
use crate::hf::safetensors_file::{WEIGHTS_FILE, float_dtype};
use crate::hf::weight_files::{INDEX_FILE, model_dir, weight_paths};
use crate::init::Initializer;
use crate::models::Family;
use crate::models::gpt2::names;
use crate::models::llama::names as llama_names;

/// The largest header read: safetensors' own bound (100 MB).
const MAX_HEADER: u64 = 100_000_000;

/// A tensor the model needs from the files.
struct Wanted {
    /// Its name in the files.
    key: String,
    /// The model's parameter it fills (part of, for Llama's fused `attn.qkv`).
    param: String,
    /// Its stored shape.
    dims: Vec<usize>,
    /// The first axis may be longer (GPT-2's position table, cropped to the context).
    more_rows: bool,
}

/// Checks the weight files of the model directory `dir` (a Hugging Face cache entry's
/// snapshot, or a PEFT adapter directory's file and its base's) from their headers alone: a
/// file whose header does not parse, or that is shorter or longer than its header says, is
/// [`Error::CorruptCheckpoint`] naming it (`truncated: 269 060 552 bytes where its header needs
/// 538 090 408`); a tensor the model of its `config.json` needs that is missing, not floating
/// point or of another shape, or one the model has no place for, is [`Error::Checkpoint`]
/// naming it, as loading it would say after reading every tensor. A GGUF file is checked as
/// [`check_gguf`](crate::gguf::check_gguf) checks it.
pub fn check_weights(dir: &Path) -> Result<()> {
    if PeftAdapter::is_adapter_dir(dir) {
        read_header(&dir.join(ADAPTER_WEIGHTS))?;
        return check_weights(&adapter_base(dir)?);
    }
    let pretrained = Pretrained::read(dir)?;
    let dir = model_dir(dir)?;
    let device = Device::meta(DeviceConfig::new(u64::MAX / 4))?;
    let mut init = Initializer::new(&device, DType::F32, 0);
    let gpt = Gpt::new(&mut init, pretrained.gpt_config(0.0))?;
    let mut params = Vec::new();
    crate::lora::visit_base(&gpt, &mut |name, t| {
        params.push((name.to_owned(), t.shape().dims().to_vec()))
    });
    let tied = gpt.head.is_none();
    match pretrained {
        Pretrained::Gpt2(_) => {
            let path = dir.join(WEIGHTS_FILE);
            let tensors = headers(std::slice::from_ref(&path))?;
            let prefix = match tensors.keys().any(|k| k.starts_with(names::PREFIX)) {
                true => names::PREFIX,
                false => "",
            };
            let wanted = params
                .iter()
                .map(|(name, dims)| gpt2_wanted(name, dims, prefix))
                .collect::<Result<Vec<_>>>()?;
            let rest = |key: &str| names::is_buffer(key) || (tied && key == names::LM_HEAD);
            check_tensors(&path, &tensors, &wanted, rest)
        }
        Pretrained::Llama(_) | Pretrained::Gemma3(_) => {
            let paths = weight_paths(&dir)?;
            let source = match dir.join(INDEX_FILE) {
                index if index.exists() => index,
                _ => dir.join(WEIGHTS_FILE),
            };
            let tensors = headers(&paths)?;
            let config = gpt.config();
            let (q, kv) = (
                config.heads * config.head_dim(),
                config.kv_heads() * config.head_dim(),
            );
            let mut wanted = Vec::new();
            for (name, dims) in &params {
                wanted.extend(named_wanted(&config.family, name, dims, (q, kv))?);
            }
            let rest =
                |key: &str| llama_names::is_buffer(key) || (tied && key == llama_names::LM_HEAD);
            check_tensors(&source, &tensors, &wanted, rest)
        }
        Pretrained::Gguf(_) => crate::gguf::check_gguf(&dir),
    }
}

/// The tensor of a GPT-2 file that fills the parameter `name` of `dims`.
fn gpt2_wanted(name: &str, dims: &[usize], prefix: &str) -> Result<Wanted> {
    let (hf, layout) = names::hf_name(name).ok_or_else(|| Error::Checkpoint {
        path: PathBuf::from("(model)"),
        key: name.to_owned(),
        detail: "a parameter GPT-2 has no tensor for".into(),
    })?;
    Ok(Wanted {
        key: match hf.as_str() {
            names::LM_HEAD => hf,
            _ => format!("{prefix}{hf}"),
        },
        param: name.to_owned(),
        dims: names::stored_dims(dims, layout),
        more_rows: layout == names::Layout::Positions,
    })
}

/// The tensors of a file of `family` (laid out as Llama's) that fill the parameter `name` of
/// `dims`, with `q` and `kv` rows of the fused `attn.qkv` from each projection.
fn named_wanted(
    family: &Family,
    name: &str,
    dims: &[usize],
    (q, kv): (usize, usize),
) -> Result<Vec<Wanted>> {
    let keys = family.hf_names(name).ok_or_else(|| Error::Checkpoint {
        path: PathBuf::from("(model)"),
        key: name.to_owned(),
        detail: "a parameter the family has no tensor for".into(),
    })?;
    let rows = match name.contains("attn.qkv.") {
        true => vec![q, kv, kv],
        false => vec![dims.first().copied().unwrap_or(1)],
    };
    Ok(keys
        .into_iter()
        .zip(rows)
        .map(|(key, rows)| {
            let mut part = dims.to_vec();
            if let Some(first) = part.first_mut() {
                *first = rows;
            }
            Wanted {
                key,
                param: name.to_owned(),
                dims: part,
                more_rows: false,
            }
        })
        .collect())
}

/// Checks that `tensors` hold every `wanted` one, floating point and of its shape, and
/// nothing else but what `rest` lets be; `source` names the files in a missing tensor's error.
fn check_tensors(
    source: &Path,
    tensors: &HashMap<String, (PathBuf, TensorInfo)>,
    wanted: &[Wanted],
    rest: impl Fn(&str) -> bool,
) -> Result<()> {
    for want in wanted {
        let shape = Shape::new(&want.dims);
        let Some((path, info)) = tensors.get(&want.key) else {
            return Err(Error::Checkpoint {
                path: source.to_owned(),
                key: want.key.clone(),
                detail: format!(
                    "missing: the model's `{}` needs it, of shape {shape}",
                    want.param
                ),
            });
        };
        let error = |detail: String| Error::Checkpoint {
            path: path.clone(),
            key: want.key.clone(),
            detail,
        };
        if float_dtype(info.dtype).is_none() {
            return Err(error(format!("holds {:?}, not floating point", info.dtype)));
        }
        let fits = match (want.more_rows, info.shape.as_slice(), want.dims.as_slice()) {
            (true, [rows, width], [need, want_width]) => rows >= need && width == want_width,
            (_, stored, dims) => stored == dims,
        };
        if !fits {
            let more = if want.more_rows { " or more rows" } else { "" };
            return Err(error(format!(
                "holds {}, where the model's `{}` needs {shape}{more}",
                Shape::new(&info.shape),
                want.param
            )));
        }
    }
    let used: HashSet<&str> = wanted.iter().map(|w| w.key.as_str()).collect();
    let mut extra: Vec<&String> = tensors
        .keys()
        .filter(|key| !used.contains(key.as_str()) && !rest(key))
        .collect();
    extra.sort();
    match extra.first() {
        Some(key) => Err(Error::Checkpoint {
            path: tensors[*key].0.clone(),
            key: (*key).clone(),
            detail: "the model has no parameter for this tensor (another architecture or size?)"
                .into(),
        }),
        None => Ok(()),
    }
}

/// Every tensor the files at `paths` describe, by name, with its file; a name in two files is
/// an error naming both.
fn headers(paths: &[PathBuf]) -> Result<HashMap<String, (PathBuf, TensorInfo)>> {
    let mut tensors = HashMap::new();
    for path in paths {
        let metadata = read_header(path)?;
        for (name, info) in metadata.tensors() {
            let entry = (path.clone(), info.clone());
            if let Some((first, _)) = tensors.insert(name.clone(), entry) {
                return Err(Error::Checkpoint {
                    path: path.clone(),
                    key: name,
                    detail: format!("also in {}", first.display()),
                });
            }
        }
    }
    Ok(tensors)
}

/// The header of the safetensors file at `path`, read alone and checked against the file's
/// length.
fn read_header(path: &Path) -> Result<Metadata> {
    let corrupt = |detail: String| Error::CorruptCheckpoint {
        path: path.to_owned(),
        detail,
    };
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    let mut len = [0; 8];
    if size < 8 || file.read_exact(&mut len).is_err() {
        return Err(corrupt(format!(
            "{} bytes, shorter than a header's length",
            grouped_digits(size)
        )));
    }
    let len = u64::from_le_bytes(len);
    if len > MAX_HEADER {
        return Err(corrupt(format!(
            "a header of {} bytes, more than safetensors allows",
            grouped_digits(len)
        )));
    }
    if 8 + len > size {
        return Err(corrupt(format!(
            "truncated: {} bytes where its header alone needs {}",
            grouped_digits(size),
            grouped_digits(8 + len)
        )));
    }
    let mut json = vec![0; len as usize];
    file.read_exact(&mut json).map_err(io)?;
    let metadata: Metadata =
        serde_json::from_slice(&json).map_err(|err| corrupt(format!("its header: {err}")))?;
    let needs = 8 + len + metadata.data_len() as u64;
    match size.cmp(&needs) {
        std::cmp::Ordering::Less => Err(corrupt(format!(
            "truncated: {} bytes where its header needs {}",
            grouped_digits(size),
            grouped_digits(needs)
        ))),
        std::cmp::Ordering::Greater => Err(corrupt(format!(
            "{} bytes where its header needs {}: more than its tensors",
            grouped_digits(size),
            grouped_digits(needs)
        ))),
        std::cmp::Ordering::Equal => Ok(metadata),
    }
}

/// `n` with its digits in groups of three, as the messages write sizes (`538 090 408`).
pub fn grouped_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_written_in_groups_of_three_digits() {
        assert_eq!(grouped_digits(0), "0");
        assert_eq!(grouped_digits(999), "999");
        assert_eq!(grouped_digits(1000), "1 000");
        assert_eq!(grouped_digits(538_090_408), "538 090 408");
    }
}
