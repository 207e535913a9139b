//! Loading a Hugging Face directory laid out as Llama's (`[out, in]` weights under the
//! family's names, the query, key and value projections apart) into a [`Gpt`] of its family:
//! the Llama family and Gemma 3.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use headroom_kernels::{DType, Shape};
use safetensors::tensor::TensorView;

use crate::error::{Error, Result};
use crate::hf::finite::non_finite;
use crate::hf::pretrained::Pretrained;
use crate::hf::safetensors_file::float_dtype;
use crate::hf::weight_files::{WeightFiles, by_name, model_dir};
use crate::models::Family;
use crate::models::llama::names::{EMBED, LM_HEAD, is_buffer};
use crate::overwrite::{base_shapes, fill_base};
use crate::{Gpt, GptConfig};

/// The file's tensors that fill one parameter, checked.
struct Plan<'a> {
    /// Its parts, stacked along the first axis, each with its name and file.
    parts: Vec<(String, &'a Path, TensorView<'a>)>,
    /// The dtype the parts are stored in.
    stored: DType,
}

/// Fills every parameter of `gpt` from the Hugging Face directory `dir` of its family
/// (`LlamaForCausalLM`, `Qwen2ForCausalLM`, `Qwen3ForCausalLM`, `MistralForCausalLM` or
/// `Gemma3ForCausalLM`): its `config.json` ([`Pretrained::read`]) and its `model.safetensors`,
/// or the shards that
/// `model.safetensors.index.json` lists, mapped into memory. `dir` may also be a Hugging Face
/// cache entry (`models--{org}--{name}`), whose `refs/main` snapshot is read.
///
/// - The query, key and value projections (`q_proj`, `k_proj`, `v_proj`, and their biases in
///   Qwen2) fill the model's fused `attn.qkv` in that order.
/// - A tied model takes its head from `model.embed_tokens`; a `lm_head.weight` in the files
///   must then equal it. An untied model needs `lm_head.weight`.
/// - Tensors are stored in the parameters' dtype as they are (bf16 into bf16, with no copy in
///   another dtype); in another float dtype they are cast.
/// - The model's shape and options (rotary base and scaling, norms' epsilon) must be the
///   configuration's; its context may be shorter.
///
/// Every name, shape and value is checked before any parameter changes: a tensor the model
/// needs that is missing or of the wrong shape, holds a NaN or an infinity, or a tensor the
/// model has no place for is an [`Error::Checkpoint`] naming it and its file; a file that is
/// not a complete safetensors file is [`Error::CorruptCheckpoint`]. Parameters are then
/// replaced one at a time (so that the old and the new weights are never all held at once):
/// only running out of memory while doing so leaves some replaced.
pub fn load_llama(dir: &Path, gpt: &mut Gpt) -> Result<()> {
    let dir = model_dir(dir)?;
    let config = Pretrained::read(&dir)?;
    check_model(&dir, &config, gpt)?;
    let files = WeightFiles::open(&dir)?;
    let parsed = files.parse()?;
    let tensors = by_name(&parsed)?;
    let params = base_shapes(gpt);
    let quantized = gpt.quantized_weights_mut().into_iter();
    let quantized: Vec<_> = quantized
        .map(|(name, q)| (name, q.shape().clone()))
        .collect();
    let config = gpt.config();
    let (q, kv) = (
        config.heads * config.head_dim(),
        config.kv_heads() * config.head_dim(),
    );
    let plans = params
        .iter()
        .chain(&quantized)
        .map(|(name, shape)| {
            let rows = match name.contains("attn.qkv.") {
                true => vec![q, kv, kv],
                false => vec![shape.dims()[0]],
            };
            plan(&tensors, &config.family, name, shape, &rows)
        })
        .collect::<Result<Vec<_>>>()?;
    check_rest(&tensors, &plans, gpt.head.is_none())?;
    let mut plans = plans;
    let quantized_plans = plans.split_off(params.len());
    let mut plans = plans.into_iter();
    fill_base(gpt, |name, _, write| {
        let plan = plans.next().ok_or_else(|| Error::Checkpoint {
            path: dir.clone(),
            key: name.to_owned(),
            detail: "the model changed while loading".into(),
        })?;
        let bytes: std::borrow::Cow<'_, [u8]> = match plan.parts.as_slice() {
            [(_, _, view)] => view.data().into(),
            parts => parts
                .iter()
                .flat_map(|(_, _, v)| v.data())
                .copied()
                .collect::<Vec<u8>>()
                .into(),
        };
        write(plan.stored, &bytes)
    })?;
    // Weights stored quantized: quantized on the host one at a time, only their codes uploaded.
    for ((_, stored), plan) in gpt.quantized_weights_mut().into_iter().zip(quantized_plans) {
        let values: Vec<f32> = plan
            .parts
            .iter()
            .flat_map(|(_, _, view)| host_f32(view.data(), plan.stored))
            .collect();
        stored.write(&values)?;
    }
    Ok(())
}

/// Little-endian values of `dtype` (a float dtype the loader accepts) as f32.
fn host_f32(bytes: &[u8], dtype: DType) -> Vec<f32> {
    let size = dtype.size();
    let value = |b: &[u8]| match dtype {
        DType::F64 => f64::from_le_bytes(b.try_into().unwrap_or_default()) as f32,
        DType::F32 => f32::from_le_bytes(b.try_into().unwrap_or_default()),
        DType::F16 => half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
        _ => half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
    };
    bytes.chunks_exact(size).map(value).collect()
}

/// Checks that `gpt` has the shape and the options of `config` (but for a shorter context).
fn check_model(dir: &Path, config: &Pretrained, gpt: &Gpt) -> Result<()> {
    let theirs = config.gpt_config(gpt.config().dropout);
    let ours = gpt.config();
    let differ = |field: &str, detail: String| Error::Checkpoint {
        path: dir.join(crate::json_fields::CONFIG_FILE),
        key: field.to_owned(),
        detail,
    };
    if std::mem::discriminant(&ours.family) != std::mem::discriminant(&theirs.family)
        || matches!(ours.family, Family::Gpt2)
    {
        let detail = format!(
            "a checkpoint of {}, where the model is of {}",
            theirs.family.name(),
            ours.family.name()
        );
        return Err(differ("architectures", detail));
    }
    if ours.context > theirs.context {
        let detail = format!(
            "{} positions, where the model reads {}",
            theirs.context, ours.context
        );
        return Err(differ("max_position_embeddings", detail));
    }
    let same_shape = GptConfig {
        context: ours.context,
        ..theirs
    };
    if same_shape != *ours {
        let detail =
            format!("the checkpoint's model is {same_shape:?}, where the model is {ours:?}");
        return Err(differ("(shape)", detail));
    }
    Ok(())
}

/// The parts that fill the parameter `name` of `shape`, each checked: part `i` holds `rows[i]`
/// rows of the parameter.
fn plan<'a>(
    tensors: &HashMap<String, (&'a Path, TensorView<'a>)>,
    family: &Family,
    name: &str,
    shape: &Shape,
    rows: &[usize],
) -> Result<Plan<'a>> {
    let keys = family.hf_names(name).ok_or_else(|| Error::Checkpoint {
        path: Path::new("(model)").to_owned(),
        key: name.to_owned(),
        detail: "a parameter the family has no tensor for".into(),
    })?;
    let mut parts = Vec::new();
    let mut stored = None;
    for (key, &part_rows) in keys.into_iter().zip(rows) {
        let Some((path, view)) = tensors.get(&key) else {
            let detail = format!("missing: the model's `{name}` needs it (of shape {shape})");
            return Err(Error::Checkpoint {
                path: Path::new("(weights)").to_owned(),
                key,
                detail,
            });
        };
        let error = |detail: String| Error::Checkpoint {
            path: path.to_path_buf(),
            key: key.clone(),
            detail,
        };
        let dtype = float_dtype(view.dtype())
            .ok_or_else(|| error(format!("holds {:?}, not floating point", view.dtype())))?;
        if stored.is_some_and(|s| s != dtype) {
            return Err(error(format!(
                "holds {dtype}, where the other parts of `{name}` hold another"
            )));
        }
        stored = Some(dtype);
        let mut want = shape.dims().to_vec();
        want[0] = part_rows;
        if view.shape() != want.as_slice() {
            let detail = format!(
                "holds {}, where the model's `{name}` ({shape}) needs {}",
                Shape::new(view.shape()),
                Shape::new(&want)
            );
            return Err(error(detail));
        }
        if let Some(found) = non_finite(view.data(), dtype, view.shape()) {
            return Err(error(found.describe()));
        }
        parts.push((key, *path, view.clone()));
    }
    let stored = stored.unwrap_or(DType::F32);
    Ok(Plan { parts, stored })
}

/// Checks the tensors no parameter takes: a tied head equal to the token embedding, the
/// rotary buffers, and nothing else.
fn check_rest(
    tensors: &HashMap<String, (&Path, TensorView)>,
    plans: &[Plan],
    tied: bool,
) -> Result<()> {
    let used: HashSet<&str> = plans
        .iter()
        .flat_map(|p| p.parts.iter().map(|(k, _, _)| k.as_str()))
        .collect();
    let mut rest: Vec<&String> = tensors
        .keys()
        .filter(|k| !used.contains(k.as_str()) && !is_buffer(k))
        .collect();
    rest.sort();
    for key in rest {
        let (path, view) = &tensors[key];
        let error = |detail: &str| Error::Checkpoint {
            path: path.to_path_buf(),
            key: key.clone(),
            detail: detail.to_owned(),
        };
        if tied && key == LM_HEAD {
            let same = tensors.get(EMBED).is_some_and(|(_, embed)| {
                embed.shape() == view.shape() && embed.data() == view.data()
            });
            if !same {
                return Err(error(
                    "differs from the token embedding, and the model ties its head to it \
                     (build it with tie_embeddings false)",
                ));
            }
            continue;
        }
        return Err(error(
            "the model has no parameter for this tensor (another architecture or size?)",
        ));
    }
    Ok(())
}
