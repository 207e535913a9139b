//! Headroom's own models: a GPT over token sequences or an MLP over feature vectors, with f32
//! master weights (or a GPT's in bf16, `model.param_dtype`), its inputs' shape taken from the data, built as the configuration's
//! `[model]` describes ([`BuiltinModel`]) and trained through the same trait as a user's model.

use std::any::Any;

use headroom_autograd::Tensor;
use headroom_collectives::SharedWorld;
use headroom_kernels::{DType, Device};
use headroom_nn::hf::PeftAdapter;
use headroom_nn::lora::{self, QuantizedBase};
use headroom_nn::loss::cross_entropy;
use headroom_nn::{
    Activation, DropoutCounter, Family, Gpt, GptConfig, Initializer, Module, ParamShards,
    Placement, Sequential, mlp,
};

use crate::config::{ModelConfig, ModelFamily, ModelKind};
use crate::data::{DataShape, DeviceBatch, FeatureShape, IGNORE, TokenShape};
use crate::error::{Error, Result};
use crate::model::trainable::{Knobs, ModelFactory, ModelSettings, Offloads, TrainableModel};

/// A GPT or an MLP.
pub enum TrainModel {
    /// Over token sequences.
    Gpt(Box<Gpt>),
    /// Over feature vectors.
    Mlp(Sequential),
}

impl TrainModel {
    /// The model `config` describes for data of `shape`, on `device`, its weights from `seed`.
    /// With `weights_on`, the blocks' weights are drawn there, the host tier they stream from
    /// ([`Gpt::new_offloaded`]).
    pub fn build(
        config: &ModelConfig,
        shape: &DataShape,
        device: &Device,
        (seed, weights_on): (u64, Option<&Device>),
    ) -> Result<Self> {
        Self::build_sharded(config, shape, device, (seed, weights_on, None))
    }

    /// [`TrainModel::build`], a GPT drawn sharded over `shards` where given and nothing is
    /// loaded into it whole afterwards ([`Gpt::new_sharded`]).
    pub fn build_sharded(
        config: &ModelConfig,
        shape: &DataShape,
        device: &Device,
        (seed, weights_on, shards): (u64, Option<&Device>, Option<&SharedWorld>),
    ) -> Result<Self> {
        let mut init = Initializer::new(device, config.param_dtype.dtype(), seed);
        // QLoRA: the blocks' linear layers are drawn (or loaded, later) into quantized storage.
        let base = config.lora.as_ref().and_then(|lora| lora.base);
        init.set_quantize(base.map(QuantizedBase::format));
        match (config.kind, shape.as_tokens(), shape.as_features()) {
            (ModelKind::Gpt, Some(TokenShape { vocab, len }), _) => {
                let shape = gpt_shape(config, vocab, len)?;
                // Drawn sharded, pretrained weights then loaded into its chunks and adapters
                // drawn whole over it and cut as it was; but for a PEFT directory's adapters,
                // loaded into the whole model before it is cut.
                let peft = config
                    .init_from
                    .as_deref()
                    .is_some_and(PeftAdapter::is_adapter_dir);
                let drawn_sharded = shards.filter(|_| !peft);
                let mut gpt = match (weights_on, drawn_sharded) {
                    (Some(host), _) => Gpt::new_offloaded(&mut init, shape, host)?,
                    (None, Some(world)) => Gpt::new_sharded(&mut init, shape, world)?,
                    (None, None) => Gpt::new(&mut init, shape)?,
                };
                // A Llama-family model's options already hold its epsilon.
                if let (Some(eps), Family::Gpt2) = (config.norm_eps, gpt.config().family) {
                    let blocks = gpt.blocks.iter_mut();
                    let norms = blocks.flat_map(|b| [&mut b.ln1, &mut b.ln2]);
                    for norm in norms.chain([&mut gpt.ln_f]) {
                        norm.set_eps(eps);
                    }
                }
                let width = gpt.config().width;
                let placement = Placement {
                    recompute: config.recompute.unwrap_or_default().for_gpt(width),
                    head_chunk: config.head_chunk.or(gpt.head_chunk()),
                    ..gpt.placement().clone()
                };
                gpt.set_placement(placement)?;
                if let Some(adapters) = &config.lora {
                    init.set_dtype(DType::F32);
                    let attached = lora::attach(&mut gpt, adapters, &mut init)?;
                    tracing::debug!(
                        "LoRA: {} modules, {} parameters trained, {} frozen",
                        attached.modules,
                        attached.trainable,
                        attached.frozen
                    );
                    // Placed again, the adapters join the streamed weights.
                    gpt.set_placement(gpt.placement().clone())?;
                }
                Ok(Self::Gpt(Box::new(gpt)))
            }
            (ModelKind::Mlp, _, Some(FeatureShape { dim, classes })) => {
                let mut sizes = vec![dim];
                sizes.extend(&config.hidden);
                sizes.push(classes.max(2));
                Ok(Self::Mlp(mlp(&mut init, &sizes, Activation::Relu)?))
            }
            (kind, _, _) => Err(Error::config(format!(
                "model.kind: a {kind} model cannot read samples of {shape}"
            ))),
        }
    }

    /// The same with no weights: its shape, checked against the data's.
    ///
    /// A GPT reads the data's vocabulary; an explicit `model.vocab` must equal it. Its
    /// positions are `model.context` (or the preset's, or the data's sample length), at least
    /// the data's sample length.
    pub fn check(config: &ModelConfig, shape: &DataShape) -> Result<()> {
        match (config.kind, shape.as_tokens()) {
            (ModelKind::Gpt, Some(TokenShape { vocab, len })) => {
                gpt_shape(config, vocab, len).map(drop)
            }
            (ModelKind::Mlp, _) if shape.has_starts() => Err(packed_for_mlp()),
            _ => Ok(()),
        }
    }

    /// True for a GPT whose blocks keep their activations: one that `model.recompute` would
    /// make lighter.
    pub fn could_recompute(&self) -> bool {
        matches!(self, Self::Gpt(gpt) if !gpt.recompute().whole_blocks())
    }

    /// The model as a module (its parameters, for optimizers and checkpoints).
    pub fn module(&self) -> &dyn Module {
        match self {
            Self::Gpt(m) => m.as_ref(),
            Self::Mlp(m) => m,
        }
    }

    /// The model as a module, mutably.
    pub fn module_mut(&mut self) -> &mut dyn Module {
        match self {
            Self::Gpt(m) => m.as_mut(),
            Self::Mlp(m) => m,
        }
    }

    /// The logits for `inputs` (`[B, T, vocab]` or `[B, classes]`).
    pub fn logits(&self, inputs: &Tensor) -> Result<Tensor> {
        Ok(self.module().forward(inputs)?)
    }

    /// The mean cross-entropy over the scored targets; a GPT's head and loss run fused, so
    /// that its logits never exist whole. With `starts` (a packed batch's [`STARTS`](crate::data::STARTS)) each
    /// document attends only to itself, its positions counted from its start.
    pub fn loss(
        &self,
        inputs: &Tensor,
        targets: &Tensor,
        starts: Option<&Tensor>,
    ) -> Result<Tensor> {
        match (self, starts) {
            (Self::Gpt(gpt), None) => Ok(gpt.loss(inputs, targets, Some(IGNORE))?),
            (Self::Gpt(gpt), Some(starts)) => {
                Ok(gpt.loss_in_documents(inputs, targets, Some(IGNORE), starts)?)
            }
            (Self::Mlp(_), None) => {
                Ok(cross_entropy(&self.logits(inputs)?, targets, Some(IGNORE))?)
            }
            (Self::Mlp(_), Some(_)) => Err(packed_for_mlp()),
        }
    }

    /// The counter of dropout masks drawn (GPT), saved with checkpoints.
    pub fn dropout_counter(&self) -> Option<&DropoutCounter> {
        match self {
            Self::Gpt(m) => Some(m.dropout_counter()),
            Self::Mlp(_) => None,
        }
    }
}

/// The shape of the GPT `config` describes for token data of `vocab` tokens in samples of
/// `len`.
fn gpt_shape(config: &ModelConfig, vocab: usize, len: usize) -> Result<GptConfig> {
    if let Some(explicit) = config.vocab.filter(|&v| v != vocab) {
        return Err(Error::config(format!(
            "model.vocab: {explicit} tokens, where the data has a vocabulary of {vocab}"
        )));
    }
    let context = config.window(len);
    if context < len {
        return Err(Error::config(format!(
            "model.context: {context} positions cannot read the data's samples of {len} tokens"
        )));
    }
    Ok(config.gpt_config(vocab, context))
}

/// The built-in models, as a configuration describes them.
#[derive(Debug, Clone)]
pub struct BuiltinModel(pub ModelConfig);

impl ModelFactory for BuiltinModel {
    fn build(
        &self,
        device: &Device,
        shape: &DataShape,
        settings: &ModelSettings,
    ) -> Result<Box<dyn TrainableModel>> {
        let mut config = self.0.clone();
        if config.kind == ModelKind::Gpt {
            config.recompute = Some(settings.recompute);
            config.head_chunk = settings.head_chunk.or(config.head_chunk);
        }
        Ok(Box::new(TrainModel::build_sharded(
            &config,
            shape,
            device,
            (
                settings.seed,
                settings.weights_on.as_ref(),
                settings.shards.as_ref(),
            ),
        )?))
    }

    fn knobs(&self, shape: &DataShape) -> Knobs {
        match (self.0.kind, shape.as_tokens()) {
            (ModelKind::Gpt, Some(tokens)) => Knobs {
                cheap_recompute: true,
                up_recompute: self.0.family == ModelFamily::Llama,
                block_recompute: true,
                tiled_mlp: true,
                offload_activations: true,
                offload_weights: true,
                fused_head: Some(tokens.vocab),
                shard_params: true,
            },
            _ => Knobs::default(),
        }
    }

    /// A GPT's shape against the data's; the log says when the data's vocabulary replaces a
    /// preset's.
    fn check(&self, shape: &DataShape) -> Result<()> {
        TrainModel::check(&self.0, shape)?;
        if let (Some(preset), None, Some(tokens)) = (self.0.preset, self.0.vocab, shape.as_tokens())
            && tokens.vocab != preset.shape().vocab
        {
            tracing::info!(
                "the data's vocabulary of {} tokens replaces {}'s {}",
                tokens.vocab,
                preset.name(),
                preset.shape().vocab
            );
        }
        Ok(())
    }

    /// A GPT from `model.init_from`'s pretrained weights, where the configuration names them.
    fn initialize(&self, model: &mut dyn TrainableModel) -> Result<()> {
        let builtin = model.as_any_mut().downcast_mut::<TrainModel>();
        if let (Some(dir), Some(TrainModel::Gpt(gpt))) = (&self.0.init_from, builtin) {
            self.0.check_init_from()?;
            headroom_nn::hf::Pretrained::read(dir)?.load(dir, gpt)?;
            tracing::info!("started from the pretrained weights of {}", dir.display());
        }
        Ok(())
    }
}

impl TrainableModel for TrainModel {
    fn module(&self) -> &dyn Module {
        TrainModel::module(self)
    }

    fn module_mut(&mut self) -> &mut dyn Module {
        TrainModel::module_mut(self)
    }

    fn loss(&self, batch: &DeviceBatch) -> Result<Tensor> {
        TrainModel::loss(self, batch.inputs()?, batch.targets()?, batch.starts())
    }

    fn logits(&self, inputs: &Tensor) -> Result<Tensor> {
        TrainModel::logits(self, inputs)
    }

    fn dropout_counter(&self) -> Option<&DropoutCounter> {
        TrainModel::dropout_counter(self)
    }

    fn could_recompute(&self) -> bool {
        TrainModel::could_recompute(self)
    }

    fn set_host_tier(&mut self, offloads: &Offloads) -> Result<()> {
        if let TrainModel::Gpt(gpt) = self {
            gpt.set_placement(Placement {
                offload_activations: offloads.activations.clone(),
                offload_weights: offloads.weights.clone(),
                fetch_ahead: offloads.ahead,
                ..gpt.placement().clone()
            })?;
        }
        Ok(())
    }

    fn shard_params(&mut self, world: &SharedWorld) -> Result<()> {
        match self {
            TrainModel::Gpt(gpt) => Ok(gpt.shard_params(world)?),
            TrainModel::Mlp(_) => Err(Error::config(
                "optimizer.shard_params: the built-in MLP is not sharded over ranks; a GPT is",
            )),
        }
    }

    fn keep_gathered(&mut self) -> Result<()> {
        match self {
            TrainModel::Gpt(gpt) => Ok(gpt.keep_gathered()?),
            TrainModel::Mlp(_) => Err(Error::config(
                "optimizer.shard_grads: the built-in MLP is not sharded over ranks; a GPT is",
            )),
        }
    }

    fn param_shards(&self) -> Option<&ParamShards> {
        match self {
            TrainModel::Gpt(gpt) => gpt.param_shards(),
            TrainModel::Mlp(_) => None,
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Packed windows hold several documents that only a GPT keeps apart.
fn packed_for_mlp() -> Error {
    Error::config(
        "model.kind = \"mlp\" cannot read packed windows: train a GPT, or set data.packing = false",
    )
}
