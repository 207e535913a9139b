//! Puts adapters on a decoder: freezes every tensor it holds, then gives each targeted linear
//! layer an adapter, named and shaped as PEFT names and shapes them.

use headroom_alloc::Tag;
use headroom_autograd::Tensor;
use headroom_kernels::DType;

use crate::decoder::Gpt;
use crate::error::{Error, Result};
use crate::init::{Init, Initializer};
use crate::layers::activation::Dropout;
use crate::layers::linear::Linear;
use crate::layers::lora_adapter::{LoraAdapter, LoraPart};
use crate::lora::config::LoraConfig;
use crate::module::Module;

/// A linear layer an adapter can go on, with the PEFT modules it stands for: one covering it
/// whole, or a slice each where transformers keeps apart what Headroom fuses (`q_proj`,
/// `k_proj` and `v_proj` in `qkv`).
pub(crate) struct Adaptable<'a> {
    pub layer: &'a mut Linear,
    /// The whole weight's `[out, in]` (not its chunk's where the decoder is sharded).
    pub dims: [usize; 2],
    /// `(module path, first row, rows)`, in output order.
    pub modules: Vec<(String, usize, usize)>,
}

/// Every layer of `gpt`'s blocks an adapter can go on, in visiting order, with the module
/// paths its family's checkpoints give it (`model.layers.{i}.self_attn.q_proj`,
/// `transformer.h.{i}.attn.c_attn`): a fused `qkv` covers three, a slice each.
pub(crate) fn adaptable(gpt: &mut Gpt) -> Vec<Adaptable<'_>> {
    let family = gpt.config().family;
    let shards = gpt.param_shards().cloned();
    let mut out = Vec::new();
    for (i, block) in gpt.blocks.iter_mut().enumerate() {
        let attn = &block.attn;
        let (q, kv) = (
            attn.heads() * attn.head_dim(),
            attn.kv_heads() * attn.head_dim(),
        );
        for (name, layer) in block.linears_mut() {
            let weight = format!("blocks.{i}.{name}.weight");
            let whole_shape = shards.as_ref().and_then(|s| s.whole_shape(&weight));
            let dims = match whole_shape.map_or(layer.weight.dims(), |s| s.dims()) {
                &[rows, cols] => [rows, cols],
                _ => continue,
            };
            let paths = family.module_paths(&format!("blocks.{i}.{name}"));
            let modules = match paths.as_deref() {
                Some([q_proj, k_proj, v_proj]) => vec![
                    (q_proj.clone(), 0, q),
                    (k_proj.clone(), q, kv),
                    (v_proj.clone(), q + kv, kv),
                ],
                Some([path]) => vec![(path.clone(), 0, dims[0])],
                _ => continue,
            };
            out.push(Adaptable {
                layer,
                dims,
                modules,
            });
        }
    }
    out
}

/// What [`attach`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attached {
    /// PEFT modules given an adapter.
    pub modules: usize,
    /// Scalars in the adapters: what training now updates.
    pub trainable: usize,
    /// Scalars frozen.
    pub frozen: usize,
}

/// Freezes every tensor of `gpt` (no gradient, no optimizer state from now on) and gives each
/// layer `config` targets an adapter of `config`'s rank and scale: `A` drawn from `init`
/// (whose dtype the adapters keep; f32 is PEFT's choice for a half-precision base) and `B`
/// zeros, so that the model's outputs are unchanged until training moves `B`. Over a decoder
/// sharded already, the adapters are drawn whole and cut as its base was.
///
/// A target that names no module of this family is an error naming the modules there are.
pub fn attach(gpt: &mut Gpt, config: &LoraConfig, init: &mut Initializer) -> Result<Attached> {
    config.validate()?;
    if gpt.parameter_count() == 0 {
        return Err(Error::config(
            "lora",
            "the model is frozen already".to_owned(),
        ));
    }
    check_targets(gpt, config)?;
    gpt.visit_mut(&mut |_, t| {
        *t = t.detach();
        Ok(())
    })?;
    let (counter, training) = (gpt.dropout_counter().clone(), gpt.is_training());
    let mut modules = 0;
    for Adaptable {
        layer,
        dims: [outputs, inputs],
        modules: paths,
    } in adaptable(gpt)
    {
        let mut parts = Vec::new();
        for (path, start, rows) in paths.iter().filter(|(p, ..)| config.targets.matches(p)) {
            let name = match paths.len() {
                1 => String::new(),
                _ => path.rsplit('.').next().unwrap_or(path).to_owned(),
            };
            let bound = 1.0 / (inputs as f64).sqrt();
            parts.push(LoraPart {
                module: path.clone(),
                name,
                start: *start,
                a: init.param([config.rank, inputs], Init::Uniform(bound))?,
                b: init.param([*rows, config.rank], Init::Constant(0.0))?,
            });
        }
        if parts.is_empty() {
            continue;
        }
        modules += parts.len();
        let mut dropout = Dropout::new(config.dropout, init.next_seed(), counter.clone())?;
        dropout.set_training(training);
        layer.adapter = Some(Box::new(LoraAdapter::new(
            parts,
            outputs,
            config.scale(),
            dropout,
        )?));
    }
    let attached = Attached {
        modules,
        trainable: gpt.parameter_count(),
        frozen: gpt.frozen_count(),
    };
    gpt.shard_added()?;
    Ok(attached)
}

/// Casts every frozen floating tensor of `gpt` to `dtype` (a bf16 base under f32 adapters),
/// tagged as weights; the adapters keep theirs.
pub fn cast_frozen(gpt: &mut Gpt, dtype: DType) -> Result<()> {
    gpt.visit_mut(&mut |_, t| {
        if t.is_variable() || t.dtype() == dtype || !t.dtype().is_float() {
            return Ok(());
        }
        let device = t.device().clone();
        let _weights = device.scoped_tag(Tag::WEIGHTS);
        let cast = t.array().cast(dtype)?;
        *t = Tensor::new(cast);
        Ok(())
    })
}

/// An error for a target naming no module of `gpt`'s family.
fn check_targets(gpt: &mut Gpt, config: &LoraConfig) -> Result<()> {
    let crate::lora::LoraTargets::Names(names) = &config.targets else {
        return Ok(());
    };
    let paths: Vec<String> = adaptable(gpt)
        .into_iter()
        .flat_map(|a| a.modules.into_iter().map(|(p, ..)| p))
        .collect();
    for name in names {
        if !paths
            .iter()
            .any(|p| crate::lora::config::ends_with_module(p, name))
        {
            let mut known: Vec<&str> = paths.iter().filter_map(|p| p.rsplit('.').next()).collect();
            known.sort_unstable();
            known.dedup();
            return Err(Error::config(
                "lora.targets",
                format!(
                    "`{name}` names no linear layer of this model; its layers are {}",
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(())
}
