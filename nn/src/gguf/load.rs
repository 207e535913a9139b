//! A GGUF file of the Llama family as a pretrained model: its tensors checked from the header
//! before a model is planned or built ([`check_gguf`]), and loaded into a [`Gpt`] of its shape
//! ([`load_gguf`]), one tensor dequantized at a time.

use std::path::Path;

use headroom_kernels::{DType, Device, DeviceConfig};

use super::file::{key_item, tensor_item};
use super::model_tensors::{Wanted, check_finite, check_tensors, wanted};
use super::{GgufFile, LlamaLayout};
use crate::error::Result;
use crate::init::Initializer;
use crate::models::Family;
use crate::overwrite::{base_shapes, fill_base};
use crate::{Gpt, GptConfig};

/// Checks the GGUF file at `path` from its header alone, as [`check_weights`] checks a Hugging
/// Face directory: its keys describe a model of the Llama family, and its tensors are those
/// that model takes, each of its shape and in a type dequantized here, with none it has no
/// place for. A fault is [`Error::Gguf`](crate::Error::Gguf) naming the file and the key or
/// tensor.
///
/// [`check_weights`]: crate::hf::check_weights
pub fn check_gguf(path: &Path) -> Result<()> {
    let file = GgufFile::open(path)?;
    let layout = LlamaLayout::read(&file)?;
    let device = Device::meta(DeviceConfig::new(u64::MAX / 4))?;
    let gpt = Gpt::new(
        &mut Initializer::new(&device, DType::F32, 0),
        layout.config.gpt_config(0.0),
    )?;
    let mut params = Vec::new();
    crate::lora::visit_base(&gpt, &mut |name, t| {
        params.push((name.to_owned(), t.shape().dims().to_vec()))
    });
    check_tensors(&file, &wanted(&file, &layout, &params)?)
}

/// Fills every parameter of `gpt` from the GGUF file at `path` (`llama`, `mistral`, `qwen2` or
/// `qwen3`, read as [`LlamaLayout`] reads it), whose shape and options `gpt` must have (its
/// context may be shorter).
///
/// Every tensor's name, type and shape, and every value (a NaN or an infinity is refused), is
/// checked before any parameter changes; each fault is [`Error::Gguf`](crate::Error::Gguf)
/// naming the file and the key or tensor. Each parameter is then dequantized on the host alone
/// and written into the model: cast to its dtype, or quantized into its storage where the
/// model stores the weight quantized. Only running out of memory while writing leaves some
/// parameters replaced.
pub fn load_gguf(path: &Path, gpt: &mut Gpt) -> Result<()> {
    let file = GgufFile::open(path)?;
    let layout = LlamaLayout::read(&file)?;
    check_model(&file, &layout, gpt.config())?;
    let mut params: Vec<(String, Vec<usize>)> = base_shapes(gpt)
        .into_iter()
        .map(|(name, shape)| (name, shape.dims().to_vec()))
        .collect();
    params.extend(
        gpt.quantized_weights_mut()
            .into_iter()
            .map(|(name, stored)| (name, stored.shape().dims().to_vec())),
    );
    let wanted: Vec<Wanted> = wanted(&file, &layout, &params)?;
    check_tensors(&file, &wanted)?;
    check_finite(&file, &wanted)?;
    fill_base(gpt, |name, whole, write| {
        let mut values = vec![0.0f32; whole.numel()];
        layout.read_parameter(&file, name, &mut values)?;
        write(DType::F32, bytemuck::cast_slice(&values))
    })?;
    // Weights stored quantized: quantized on the host one at a time, only their codes uploaded.
    for (name, stored) in gpt.quantized_weights_mut() {
        let mut values = vec![0.0f32; stored.shape().numel()];
        layout.read_parameter(&file, &name, &mut values)?;
        stored.write(&values)?;
    }
    Ok(())
}

/// Checks that a model of `ours` has the shape and options of the file's (but for a shorter
/// context), naming the key of the first field that differs.
fn check_model(file: &GgufFile, layout: &LlamaLayout, ours: &GptConfig) -> Result<()> {
    let theirs = layout.config.gpt_config(ours.dropout);
    let differ = |field: &str, detail: String| match field {
        "tie_embeddings" => file.error(tensor_item("output.weight"), detail),
        _ => file.error(key_item(&layout.key(field)), detail),
    };
    if std::mem::discriminant(&ours.family) != std::mem::discriminant(&theirs.family)
        || matches!(ours.family, Family::Gpt2)
    {
        let detail = format!(
            "a model of {}, where the model is of {}",
            theirs.family.name(),
            ours.family.name()
        );
        return Err(differ("family", detail));
    }
    if ours.context > theirs.context {
        let detail = format!(
            "{} positions, where the model reads {}",
            theirs.context, ours.context
        );
        return Err(differ("context", detail));
    }
    let sizes = [
        ("layers", ours.layers, theirs.layers),
        ("width", ours.width, theirs.width),
        ("heads", ours.heads, theirs.heads),
        ("vocab", ours.vocab, theirs.vocab),
    ];
    if let Some((field, a, b)) = sizes.into_iter().find(|(_, a, b)| a != b) {
        return Err(differ(field, format!("{b}, where the model has {a}")));
    }
    let same_shape = GptConfig {
        context: ours.context,
        ..theirs
    };
    if same_shape == *ours {
        return Ok(());
    }
    let detail = format!("the file's model is {same_shape:?}, where the model is {ours:?}");
    let field = match (&ours.family, &theirs.family) {
        (Family::Llama(a), Family::Llama(b)) => [
            ("kv_heads", a.kv_heads != b.kv_heads),
            ("head_dim", a.head_dim != b.head_dim),
            ("mlp_width", a.mlp_width != b.mlp_width),
            ("rope_theta", a.rope_theta != b.rope_theta),
            ("norm_eps", a.norm_eps != b.norm_eps),
            (
                "tie_embeddings",
                ours.tie_embeddings != theirs.tie_embeddings,
            ),
        ]
        .into_iter()
        .find_map(|(field, differs)| differs.then_some(field)),
        _ => None,
    };
    Err(differ(field.unwrap_or("family"), detail))
}
