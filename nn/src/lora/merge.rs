//! Folds adapters into their layers' weights: `W + scale * B A` over each part's rows, a
//! weight stored quantized taken at its dequantized values.

use headroom_alloc::Tag;
use headroom_autograd::{Tensor, no_grad};
use headroom_kernels::DType;

use crate::decoder::Gpt;
use crate::error::{Error, Result};
use crate::layers::linear::Linear;
use crate::layers::linear_weight::Weight;
use crate::layers::lora_adapter::LoraAdapter;
use crate::lora::attach::adaptable;
use crate::module::Module;

/// Adds each adapter's product to its layer's weight (summed in f32, or f64 for an f64
/// weight, and stored in the weight's dtype), drops the adapters, and makes every tensor a parameter again: the model a full
/// fine-tune would export, with the same outputs to the weight dtype's rounding. Weights stored
/// quantized become tensors of their values. Returns the layers merged.
pub fn merge(gpt: &mut Gpt) -> Result<usize> {
    if gpt.param_shards().is_some() {
        return Err(Error::config(
            "lora merge",
            "the decoder is sharded over ranks: merge its whole copy".to_owned(),
        ));
    }
    let _off = no_grad();
    let mut merged = 0;
    for entry in adaptable(gpt) {
        if let Some(adapter) = entry.layer.adapter.take() {
            merge_layer(entry.layer, &adapter)?;
            merged += 1;
        } else if let Weight::Quantized(_) = &entry.layer.weight {
            entry.layer.weight = Weight::Dense(entry.layer.weight.values()?);
        }
    }
    if let Weight::Quantized(_) = &gpt.tok_emb.weight {
        gpt.tok_emb.weight = Weight::Dense(gpt.tok_emb.weight.values()?);
    }
    gpt.visit_mut(&mut |_, t| {
        *t = Tensor::variable(t.array().clone());
        Ok(())
    })?;
    Ok(merged)
}

/// `layer.weight += scale * B A` over each part's rows.
fn merge_layer(layer: &mut Linear, adapter: &LoraAdapter) -> Result<()> {
    let (device, dtype) = (layer.weight.device().clone(), layer.weight.dtype());
    let weight = layer.weight.values()?;
    let [total, cols] = [weight.dims()[0], weight.dims()[1]];
    let wide = match dtype {
        DType::F64 => DType::F64,
        _ => DType::F32,
    };
    let zeros = |rows| Tensor::full(&device, [rows, cols], wide, 0.0);
    let mut rows = Vec::new();
    let mut end = 0;
    for part in adapter.parts() {
        if part.start > end {
            rows.push(zeros(part.start - end)?);
        }
        let ba = part.b.cast(wide)?.matmul(&part.a.cast(wide)?)?;
        rows.push(ba.scale(adapter.scale())?);
        end = part.start + part.rows();
    }
    if end < total {
        rows.push(zeros(total - end)?);
    }
    let delta = Tensor::concat(&rows.iter().collect::<Vec<_>>(), 0)?;
    let _weights = device.scoped_tag(Tag::WEIGHTS);
    let sum = weight.cast(wide)?.add(&delta)?.cast(dtype)?;
    drop(weight);
    layer.weight = Weight::Dense(Tensor::new(sum.into_array()));
    Ok(())
}
