//! A GGUF file's tensors checked against the model its keys describe: every tensor the model
//! needs is there, stored in a type dequantized here and of the shape its parameter takes, and
//! no tensor is one the model has no place for. The checks read the header alone;
//! [`check_finite`] then reads the values.

use std::collections::HashSet;

use headroom_kernels::Shape;

use super::file::tensor_item;
use super::{GgufFile, LlamaLayout, ROPE_FREQS};
use crate::error::Result;

/// The most values dequantized at once while the values are checked.
const CHUNK_VALUES: usize = 1 << 20;

/// A tensor of the file that fills a parameter of the model, or a part of one.
pub(crate) struct Wanted {
    /// Its name in the file (`blk.0.attn_q.weight`).
    pub tensor: String,
    /// The model's parameter it fills (`blocks.0.attn.qkv.weight`).
    pub param: String,
    /// The row-major shape it must have.
    pub dims: Vec<usize>,
}

/// The file's tensors that fill the parameters `params` (Headroom's names and shapes) of the
/// model `layout` describes: the fused `attn.qkv` from the query, key and value tensors, each
/// with its heads' rows.
pub(crate) fn wanted(
    file: &GgufFile,
    layout: &LlamaLayout,
    params: &[(String, Vec<usize>)],
) -> Result<Vec<Wanted>> {
    let config = &layout.config;
    let head_dim = config.options.head_dim;
    let (q, kv) = (
        config.num_attention_heads * head_dim,
        config.options.kv_heads * head_dim,
    );
    let mut wanted = Vec::new();
    for (param, dims) in params {
        let tensors = layout.tensor_names(param).ok_or_else(|| {
            file.error(
                format!("parameter `{param}`"),
                "the Llama family has no tensor for it".into(),
            )
        })?;
        let rows = match param.contains("attn.qkv.") {
            true => vec![q, kv, kv],
            false => vec![dims.first().copied().unwrap_or(1)],
        };
        for (tensor, rows) in tensors.into_iter().zip(rows) {
            let mut dims = dims.clone();
            if let Some(first) = dims.first_mut() {
                *first = rows;
            }
            wanted.push(Wanted {
                tensor,
                param: param.clone(),
                dims,
            });
        }
    }
    Ok(wanted)
}

/// Checks from the header that `file` holds every `wanted` tensor, in a type dequantized here
/// and of its shape, and nothing else but `rope_freqs.weight`: each fault is
/// [`Error::Gguf`](crate::Error::Gguf) naming the tensor.
pub(crate) fn check_tensors(file: &GgufFile, wanted: &[Wanted]) -> Result<()> {
    for want in wanted {
        let shape = Shape::new(&want.dims);
        let error = |detail: String| file.error(tensor_item(&want.tensor), detail);
        let Some(info) = file.tensor(&want.tensor) else {
            return Err(error(format!(
                "missing: the model's `{}` needs it, of shape {shape}",
                want.param
            )));
        };
        if !info.ty().is_dequantized() {
            return Err(error(format!(
                "stored as {} (type id {}), which is not dequantized here",
                info.ty(),
                info.ty().id()
            )));
        }
        if info.shape() != want.dims.as_slice() {
            return Err(error(format!(
                "holds {}, where the model's `{}` needs {shape}",
                Shape::new(info.shape()),
                want.param
            )));
        }
    }
    let used: HashSet<&str> = wanted.iter().map(|w| w.tensor.as_str()).collect();
    let extra = file
        .tensors()
        .iter()
        .find(|info| !used.contains(info.name()) && info.name() != ROPE_FREQS);
    match extra {
        Some(info) => Err(file.error(
            tensor_item(info.name()),
            "the model has no parameter for this tensor (another architecture or size?)".into(),
        )),
        None => Ok(()),
    }
}

/// Checks that every `wanted` tensor's values are finite, dequantizing a chunk of rows at a
/// time: a NaN or an infinity is [`Error::Gguf`](crate::Error::Gguf) naming the tensor and
/// the first such value's index.
pub(crate) fn check_finite(file: &GgufFile, wanted: &[Wanted]) -> Result<()> {
    let mut buffer = Vec::new();
    for want in wanted {
        let Some(info) = file.tensor(&want.tensor) else {
            continue;
        };
        let row_len = info.row_len().max(1);
        let step = (CHUNK_VALUES / row_len).max(1);
        let (mut first, mut count) = (None, 0usize);
        for start in (0..info.rows()).step_by(step) {
            let end = (start + step).min(info.rows());
            buffer.resize((end - start) * row_len, 0.0);
            file.read_rows_into(&want.tensor, start..end, &mut buffer)?;
            for (i, value) in buffer.iter().enumerate() {
                if !value.is_finite() {
                    count += 1;
                    first = first.or(Some((start * row_len + i, *value)));
                }
            }
        }
        if let Some((at, value)) = first {
            let index = match info.shape() {
                [_, cols] => format!("[{}, {}]", at / cols, at % cols),
                _ => format!("[{at}]"),
            };
            let mut detail = format!("holds {value} at {index}");
            if count > 1 {
                detail.push_str(&format!(" ({count} non-finite values in all)"));
            }
            detail.push_str("; the weights must be finite numbers");
            return Err(file.error(tensor_item(&want.tensor), detail));
        }
    }
    Ok(())
}
