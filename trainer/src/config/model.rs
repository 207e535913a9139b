//! `[model]`: which model, its shape, what it recomputes and where its weights start.

use std::path::PathBuf;

use headroom_nn::lora::LoraConfig;
use serde::{Deserialize, Serialize};

use super::model_family::ModelFamily;
use super::{ParamDtype, Preset, Problems};
use headroom_kernels::ops::rotary::Llama3Scaling;

/// Which model, and its sizes. An MLP's input width and classes come from the data; so does a
/// GPT's vocabulary where the data fixes one (addition, characters).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// `gpt` or `mlp`.
    pub kind: ModelKind,
    /// GPT: a published shape ([`Preset`]); the fields a file or a flag sets win over it.
    pub preset: Option<Preset>,
    /// GPT: the tokens it reads and predicts. Unset: the data's vocabulary, or the preset's
    /// for data without one of its own (uniform tokens); set, it must equal the data's.
    pub vocab: Option<usize>,
    /// GPT: the positions it reads, the window length of token data. Unset: the preset's, or
    /// the data's own (`data.context` for text, a problem's length for addition).
    pub context: Option<usize>,
    /// GPT: the head shares the token embedding's weight (GPT-2's tied head), one parameter
    /// with gradients from both uses.
    pub tie_embeddings: bool,
    /// GPT: features per position.
    pub width: usize,
    /// GPT: attention heads.
    pub heads: usize,
    /// GPT: transformer blocks.
    pub layers: usize,
    /// GPT: dropout.
    pub dropout: f64,
    /// GPT: the family of its parts: `gpt2` (learned positions, LayerNorm, a GELU MLP),
    /// `llama` (rotary positions, RMSNorm, a SwiGLU MLP, grouped key/value heads) or `gemma3`
    /// (Llama's with a GeGLU MLP, norms after each sublayer too, sliding-window attention).
    pub family: ModelFamily,
    /// Llama family: key/value heads, dividing `heads`. Unset: `heads` (multi-head).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_heads: Option<usize>,
    /// Llama family: features per head. Unset: `width / heads`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    /// Llama family: the MLP's inner width. Unset: 8/3 of the width, rounded up to 256.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mlp_width: Option<usize>,
    /// Llama family: the rotary base. Unset: 10000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f64>,
    /// Llama family: Llama 3's rescaling of the rotary frequencies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<Llama3Scaling>,
    /// Llama family: the longest sequence the model is made for (`max_position_embeddings`,
    /// what an export writes); the window of its data may be shorter. Unset: the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_positions: Option<usize>,
    /// Llama family: biases on the query, key and value projections (Qwen2).
    pub qkv_bias: bool,
    /// Llama family: an RMSNorm over each query and key head (Qwen3).
    pub qk_norm: bool,
    /// Gemma 3: the rotary base of the sliding-window layers. Unset: 10000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rope_local_theta: Option<f64>,
    /// Gemma 3: the scores are scaled by its inverse square root. Unset: `head_dim`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_pre_attn_scalar: Option<usize>,
    /// Gemma 3: keys a query of a sliding-window layer sees, itself included. Unset: 4096.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<usize>,
    /// Gemma 3: every this many layers, the last attends globally. Unset: 6.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sliding_window_pattern: Option<usize>,
    /// GPT: what to compute again in the backward pass instead of keeping it ([`Recompute`]):
    /// `"none"`, `"cheap"` (each norm's and GELU's output), `"cheap-up"` (and a SwiGLU MLP's
    /// up projection), `"blocks"` (activation checkpointing) or `"blocks-tiled"` (and each
    /// MLP over tiles of the sequence); `true` means `"blocks"`, `false` `"none"`. Unset: the memory policy
    /// chooses (`none` under `memory.policy = "manual"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recompute: Option<Recompute>,
    /// GPT: keep each recomputed block's input in the host tier (`memory.host_limit`) from
    /// its forward pass until its backward pass copies it back (activation offloading), so
    /// that the device keeps no activation of the blocks between the passes. Needs whole
    /// blocks recomputed: with `recompute` unset, the memory policy chooses among `blocks` and
    /// `blocks-tiled`. Unset: the memory policy offloads where nothing faster fits (never
    /// under `memory.policy = "manual"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload_activations: Option<bool>,
    /// GPT: keep the blocks' weights in the host tier and stream each block's to the device as
    /// it runs, forward and again backward (ZeRO-Infinity's parameter offload): the device
    /// holds two blocks' weights at a time (one with `fetch_ahead = false`), and their
    /// gradients and updates are on the host.
    /// Needs whole blocks recomputed and the optimizer offloaded (`optimizer.offload =
    /// true`). Unset: the memory policy streams them where nothing faster fits (never under
    /// `memory.policy = "manual"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload_weights: Option<bool>,
    /// GPT, with offloaded activations or streamed weights: bring each block's input and
    /// weights back from the host tier one block ahead of their use, their copies running
    /// beside the block before it on a GPU (`true`), or as the block starts, its kernels
    /// waiting for them (`false`): a block's input and a block's weights less on the device,
    /// for the time of the copies. Unset: the memory policy fetches ahead unless only the other
    /// fits or is faster (`true` under `memory.policy = "manual"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fetch_ahead: Option<bool>,
    /// GPT: rows of tokens whose logits the fused head and loss form at a time. Unset: the
    /// planner chooses (or, with a fixed micro-batch, the model's default of 8 Mi logits).
    pub head_chunk: Option<usize>,
    /// MLP: hidden layer sizes.
    pub hidden: Vec<usize>,
    /// GPT: the norms' epsilon. Unset: 1e-5 (GPT-2's and Llama's); a pretrained model's
    /// `layer_norm_epsilon` or `rms_norm_eps` sets it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub norm_eps: Option<f64>,
    /// GPT: start from the weights of a Hugging Face model directory (GPT-2, Llama, Qwen2,
    /// Qwen3 or Mistral: `config.json` and `model.safetensors` or its shards), whose shape wins
    /// over a preset; a shape the configuration sets otherwise is an error (a shorter context
    /// crops GPT-2's position table).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_from: Option<PathBuf>,
    /// GPT: the dtype its parameters are kept in ([`ParamDtype`]): `"f32"` (the default) or
    /// `"bf16"` (half the weights' and gradients' memory, updates rounded stochastically).
    #[serde(skip_serializing_if = "ParamDtype::is_f32")]
    pub param_dtype: ParamDtype,
    /// GPT: train low-rank adapters over the frozen model instead of the model itself
    /// (`[model.lora]`: `rank`, `alpha`, `dropout`, `rslora`, `targets`, as PEFT names
    /// them). The base keeps `param_dtype`; the adapters are f32. Checkpoints hold the
    /// adapters alone, so the base comes from `init_from` (or the seed) again on resume.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraConfig>,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            kind: ModelKind::Gpt,
            preset: None,
            vocab: None,
            context: None,
            tie_embeddings: false,
            width: 128,
            heads: 4,
            layers: 2,
            dropout: 0.0,
            family: ModelFamily::Gpt2,
            kv_heads: None,
            head_dim: None,
            mlp_width: None,
            rope_theta: None,
            rope_scaling: None,
            max_positions: None,
            qkv_bias: false,
            qk_norm: false,
            rope_local_theta: None,
            query_pre_attn_scalar: None,
            sliding_window: None,
            sliding_window_pattern: None,
            recompute: None,
            offload_activations: None,
            fetch_ahead: None,
            offload_weights: None,
            head_chunk: None,
            hidden: vec![256, 256],
            norm_eps: None,
            init_from: None,
            param_dtype: ParamDtype::F32,
            lora: None,
        }
    }
}

impl ModelConfig {
    /// The GPT `preset` names: its layers, width, heads, tied head or not, family and the
    /// family's options (its vocabulary and context apply where the data and the
    /// configuration set none).
    pub fn preset(preset: Preset) -> Self {
        let mut config = Self {
            kind: ModelKind::Gpt,
            preset: Some(preset),
            ..Self::default()
        };
        config.take_shape(&preset.shape());
        config
    }

    /// The window of token data: `context`, or a GPT-2 preset's, or `data_default` (a rotary
    /// preset's context is only the longest it reads).
    pub fn window(&self, data_default: usize) -> usize {
        let preset = self.preset.filter(|p| p.learned_positions());
        self.context
            .or(preset.map(|p| p.shape().context))
            .unwrap_or(data_default)
    }

    /// Whether the recomputed blocks' inputs wait in the host tier (`offload_activations`).
    pub fn offloads_activations(&self) -> bool {
        self.offload_activations == Some(true)
    }

    /// Whether the blocks' weights live in the host tier (`offload_weights`).
    pub fn offloads_weights(&self) -> bool {
        self.offload_weights == Some(true)
    }

    /// Whether offloaded inputs and streamed weights come back one block ahead
    /// (`fetch_ahead`, on unless set off).
    pub fn fetches_ahead(&self) -> bool {
        self.fetch_ahead != Some(false)
    }

    /// The vocabulary for data without one of its own: `vocab`, or the preset's.
    pub fn own_vocab(&self) -> Option<usize> {
        self.vocab.or(self.preset.map(|p| p.shape().vocab))
    }
}

/// What a GPT computes again in the backward pass instead of keeping it from the forward pass.
/// Less memory per sample means larger micro-batches under a limit; the variants are ordered
/// from the least recomputed to the most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Recompute {
    /// Nothing.
    #[default]
    None,
    /// The cheap elementwise results: each norm's output and the GELU's (selective
    /// recomputation): about a third of a block's activations, for no second product.
    Cheap,
    /// The cheap results, and a SwiGLU MLP's up projection (the Llama family): each block keeps
    /// the gate alone of its MLP's two products, for one product more per block.
    CheapUp,
    /// Whole blocks (activation checkpointing, `torch.utils.checkpoint`): each keeps only its
    /// input, for a second forward pass of each block (about a fifth less throughput on the
    /// training bench's GPT).
    Blocks,
    /// Whole blocks, each running its MLP over tiles of as many rows of tokens as the model is
    /// wide (the tiled MLP of Arctic Long Sequence Training): the MLP's wide intermediate
    /// exists for one tile at a time, for a third forward pass of each MLP. For long contexts.
    BlocksTiled,
}

impl Recompute {
    /// What a GPT `width` features wide recomputes under this setting.
    pub fn for_gpt(self, width: usize) -> headroom_nn::Recompute {
        match self {
            Self::None => headroom_nn::Recompute::None,
            Self::Cheap => headroom_nn::Recompute::Cheap,
            Self::CheapUp => headroom_nn::Recompute::CheapUp,
            Self::Blocks => headroom_nn::Recompute::Blocks,
            Self::BlocksTiled => headroom_nn::Recompute::BlocksTiledMlp { rows: width.max(1) },
        }
    }
}

impl<'de> Deserialize<'de> for Recompute {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Flag(bool),
            Name(String),
        }
        match Written::deserialize(deserializer)? {
            Written::Flag(true) => Ok(Self::Blocks),
            Written::Flag(false) => Ok(Self::None),
            Written::Name(name) => match name.as_str() {
                "none" => Ok(Self::None),
                "cheap" => Ok(Self::Cheap),
                "cheap-up" => Ok(Self::CheapUp),
                "blocks" => Ok(Self::Blocks),
                "blocks-tiled" => Ok(Self::BlocksTiled),
                other => Err(serde::de::Error::custom(format!(
                    "`{other}` is not none, cheap, cheap-up, blocks or blocks-tiled"
                ))),
            },
        }
    }
}

/// The kinds of model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// A decoder-only transformer over token sequences.
    Gpt,
    /// A multi-layer perceptron over feature vectors.
    Mlp,
}

impl ModelConfig {
    /// The problems of the model's own settings (how they fit the data is checked with the
    /// whole configuration).
    pub(super) fn check(&self, problems: &mut Problems) {
        match self.kind {
            ModelKind::Gpt => {
                // The data, read later, may fix the vocabulary and the context: stand-ins for
                // what is not set here.
                let shape = self.gpt_config(self.vocab.unwrap_or(1), self.context.unwrap_or(1));
                for (field, detail) in shape.problems() {
                    problems.add(format!("model.{field}: {detail}"));
                }
                self.family_problems(problems);
                if let Some(eps) = self.norm_eps {
                    problems.check(
                        eps.is_finite() && eps > 0.0,
                        format!("model.norm_eps: {eps} is not a positive number"),
                    );
                }
                for problem in self.pretrained_mismatches() {
                    problems.add(problem);
                }
                if let Some(lora) = &self.lora {
                    for (field, detail) in lora.problems() {
                        problems.add(format!("model.lora.{field}: {detail}"));
                    }
                }
                problems.check(
                    !self.offloads_activations()
                        || self.recompute.is_none_or(|r| r >= Recompute::Blocks),
                    format!(
                        "model.offload_activations: offloads the inputs of recomputed blocks, \
                         but model.recompute is {}; set it to blocks or blocks-tiled, or unset",
                        self.recompute.unwrap_or_default()
                    ),
                );
                problems.check(
                    !self.offloads_weights()
                        || self.recompute.is_none_or(|r| r >= Recompute::Blocks),
                    format!(
                        "model.offload_weights: streamed blocks are recomputed whole, but \
                         model.recompute is {}; set it to blocks or blocks-tiled, or unset",
                        self.recompute.unwrap_or_default()
                    ),
                );
                problems.check(
                    self.head_chunk != Some(0),
                    "model.head_chunk: a chunk of 0 rows; at least 1, or unset for the planner \
                     to choose"
                        .into(),
                );
            }
            ModelKind::Mlp => {
                problems.check(
                    self.recompute.unwrap_or_default() == Recompute::None,
                    "model.recompute: recomputation runs a GPT's blocks again; an MLP has none"
                        .into(),
                );
                problems.check(
                    self.head_chunk.is_none(),
                    "model.head_chunk: the fused head is a GPT's; an MLP has none".into(),
                );
                problems.check(
                    !self.offloads_activations(),
                    "model.offload_activations: offloads a GPT's blocks; an MLP has none".into(),
                );
                problems.check(
                    !self.offloads_weights(),
                    "model.offload_weights: streams a GPT's blocks; an MLP has none".into(),
                );
                problems.check(
                    self.lora.is_none(),
                    "model.lora: adapters go on a GPT's linear layers; train an MLP whole".into(),
                );
                problems.check(
                    self.hidden.iter().all(|&h| h > 0),
                    format!("model.hidden: {:?} has an empty layer", self.hidden),
                );
            }
        }
    }
}
