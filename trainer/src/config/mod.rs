//! A run's configuration: read from TOML, overridden by command-line flags, validated before
//! anything is built.

mod overrides;
mod preset;
mod pretrained;
mod size_text;
pub mod validate;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use overrides::Overrides;
pub use preset::{GPT2_VOCAB, Preset, PresetShape};

/// Steps of a run that names neither steps nor epochs.
pub const DEFAULT_STEPS: u64 = 1500;

/// The fraction of the limit the planner keeps free when the configuration sets none.
pub const DEFAULT_MARGIN: f64 = 0.1;

/// The memory limit of an addition run (the default task) that names neither a limit nor a
/// fraction: small enough that the default GPT's batch does not fit in one micro-batch, so the
/// planner's choice matters. Other runs may use the whole device by default.
pub const ADDITION_LIMIT: &str = "24MiB";

/// Everything a run needs. Every field has a default: the default run trains a small GPT on
/// the addition task under a memory limit small enough for the planner's choice to matter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// The device to train on: `cpu` (the default), or `cuda` / `cuda:N` (the `cuda` feature).
    pub device: String,
    /// Seeds the weights, the data order and the dropout masks.
    pub seed: u64,
    /// Optimizer steps to run; without `steps` or `epochs`, [`DEFAULT_STEPS`].
    pub steps: Option<u64>,
    /// Epochs to run, instead of steps.
    pub epochs: Option<u64>,
    /// The run's own directory: its metrics, plots, traces and checkpoint. Without one, a new
    /// directory `runs/<date-time>` (UTC), with `runs/latest` naming the newest.
    pub run_dir: Option<PathBuf>,
    /// Evaluate the held-out metric every this many steps (0: only at the end).
    pub eval_every: u64,
    /// Stop the run when its loss has been NaN or infinite for this many consecutive steps
    /// (0: never). A step skipped by the loss scaler with a finite loss does not count.
    pub max_nonfinite_steps: u64,
    /// The model.
    pub model: ModelConfig,
    /// The data.
    pub data: DataConfig,
    /// Batching.
    pub batch: BatchConfig,
    /// The optimizer and its schedule.
    pub optimizer: OptimizerConfig,
    /// Mixed precision.
    pub precision: PrecisionConfig,
    /// The memory budget.
    pub memory: MemoryConfig,
    /// Checkpoints.
    pub checkpoint: CheckpointConfig,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            device: "cpu".into(),
            seed: 0,
            steps: None,
            epochs: None,
            run_dir: None,
            eval_every: 500,
            max_nonfinite_steps: 10,
            model: ModelConfig::default(),
            data: DataConfig::default(),
            batch: BatchConfig::default(),
            optimizer: OptimizerConfig::default(),
            precision: PrecisionConfig::default(),
            memory: MemoryConfig::default(),
            checkpoint: CheckpointConfig::default(),
        }
    }
}

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
    /// GPT: what to compute again in the backward pass instead of keeping it ([`Recompute`]):
    /// `"none"`, `"cheap"` (each norm's and GELU's output) or `"blocks"` (activation
    /// checkpointing); `true` means `"blocks"`, `false` `"none"`. Unset: the memory policy
    /// chooses (`none` under `memory.policy = "manual"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recompute: Option<Recompute>,
    /// GPT: rows of tokens whose logits the fused head and loss form at a time. Unset: the
    /// planner chooses (or, with a fixed micro-batch, the model's default of 8 Mi logits).
    pub head_chunk: Option<usize>,
    /// MLP: hidden layer sizes.
    pub hidden: Vec<usize>,
    /// GPT: the layer norms' epsilon. Unset: PyTorch's 1e-5 (GPT-2's); a pretrained model's
    /// `layer_norm_epsilon` sets it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub norm_eps: Option<f64>,
    /// GPT: start from the weights of a Hugging Face GPT-2 directory (`config.json` and
    /// `model.safetensors`), whose shape wins over a preset; a shape the configuration sets
    /// otherwise is an error (a shorter context crops the position table).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_from: Option<PathBuf>,
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
            recompute: None,
            head_chunk: None,
            hidden: vec![256, 256],
            norm_eps: None,
            init_from: None,
        }
    }
}

impl ModelConfig {
    /// The GPT `preset` names: its layers, width and heads, and a tied head (its vocabulary and
    /// context apply where the data and the configuration set none).
    pub fn preset(preset: Preset) -> Self {
        let shape = preset.shape();
        Self {
            kind: ModelKind::Gpt,
            preset: Some(preset),
            tie_embeddings: true,
            width: shape.width,
            heads: shape.heads,
            layers: shape.layers,
            ..Self::default()
        }
    }

    /// The window of token data: `context`, or the preset's, or `data_default`.
    pub fn window(&self, data_default: usize) -> usize {
        self.context
            .or(self.preset.map(|p| p.shape().context))
            .unwrap_or(data_default)
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
    /// Whole blocks (activation checkpointing, `torch.utils.checkpoint`): each keeps only its
    /// input, for a second forward pass of each block (about a fifth less throughput on the
    /// training bench's GPT).
    Blocks,
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
                "blocks" => Ok(Self::Blocks),
                other => Err(serde::de::Error::custom(format!(
                    "`{other}` is not none, cheap or blocks"
                ))),
            },
        }
    }
}

impl From<Recompute> for headroom_nn::Recompute {
    fn from(recompute: Recompute) -> Self {
        match recompute {
            Recompute::None => Self::None,
            Recompute::Cheap => Self::Cheap,
            Recompute::Blocks => Self::Blocks,
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

/// Where samples come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataConfig {
    /// `addition`, `text`, `idx` or `csv`.
    pub kind: DataKind,
    /// Addition: the most digits of an operand.
    pub digits: u32,
    /// Addition: training problems per epoch.
    pub train_size: usize,
    /// Held-out samples for the metric.
    pub eval_size: usize,
    /// Text or CSV: the file; token shards: the prepared directory.
    pub path: Option<PathBuf>,
    /// IDX: the training images and labels, and optionally the test ones.
    pub images: Option<PathBuf>,
    /// IDX: training labels.
    pub labels: Option<PathBuf>,
    /// IDX: test images (otherwise the last `eval_size` training images are held out).
    pub test_images: Option<PathBuf>,
    /// IDX: test labels.
    pub test_labels: Option<PathBuf>,
    /// CSV: whether the first row is a header. Unset, it is one only when none of its cells is
    /// a number, and a first row with some cells numeric and some not is an error.
    pub header: Option<bool>,
    /// Text and token shards: tokens per sample, unless the model sets its context.
    pub context: usize,
    /// Batches prepared ahead by the loader's thread.
    pub prefetch: usize,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            kind: DataKind::Addition,
            digits: 4,
            train_size: 200_000,
            eval_size: 1000,
            path: None,
            images: None,
            labels: None,
            test_images: None,
            test_labels: None,
            header: None,
            context: 64,
            prefetch: 4,
        }
    }
}

/// The built-in datasets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataKind {
    /// `123+4567=` with the reversed sum as target (GPT).
    Addition,
    /// A character-level text file (GPT).
    Text,
    /// IDX files, the MNIST format (MLP).
    Idx,
    /// A CSV file of features with the class in the last column (MLP).
    Csv,
    /// Token shards written by `headroom prepare` (`data.path`, the directory), in windows
    /// of the model's context (GPT).
    TokenShards,
    /// Uniform random tokens of the model's vocabulary, seeded, in windows of its context
    /// (GPT): any shape can be planned and measured without a corpus.
    UniformTokens,
}

impl DataKind {
    /// Its name, as configurations and flags write it.
    pub fn name(self) -> &'static str {
        match self {
            DataKind::Addition => "addition",
            DataKind::Text => "text",
            DataKind::Idx => "idx",
            DataKind::Csv => "csv",
            DataKind::TokenShards => "token-shards",
            DataKind::UniformTokens => "uniform-tokens",
        }
    }
}

/// The effective batch and how it is split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchConfig {
    /// Samples per optimizer step.
    pub size: usize,
    /// The first micro-batch size; none: the planner picks it.
    pub micro: Option<usize>,
    /// Clean steps before trying a micro-batch twice as large.
    pub grow_after: u64,
    /// Fraction of the limit the planner keeps free. Unset, [`DEFAULT_MARGIN`], which the
    /// planner shrinks when it is all that stands between the limit and one sample's step.
    pub margin: Option<f64>,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            size: 128,
            micro: None,
            grow_after: 100,
            margin: None,
        }
    }
}

/// The optimizer, clipping and the learning-rate schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimizerConfig {
    /// `adamw` or `sgd`.
    pub kind: OptimizerKind,
    /// The peak learning rate: finite, 0 or more (0 leaves the weights as they are, for
    /// sanity runs).
    pub lr: f64,
    /// Weight decay (decoupled for AdamW, L2 for SGD).
    pub weight_decay: f64,
    /// AdamW's first-moment decay.
    pub beta1: f64,
    /// AdamW's second-moment decay.
    pub beta2: f64,
    /// AdamW's epsilon.
    pub eps: f64,
    /// SGD's momentum.
    pub momentum: f64,
    /// Largest global gradient norm (0: no clipping).
    pub clip: f64,
    /// How AdamW keeps its moments: `f32` (the parameters' dtype), `bf16` or `int8`
    /// (block-wise, 2048 values a scale). Unset: the memory policy chooses (`f32` under
    /// `memory.policy = "manual"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<StateKind>,
    /// Update each parameter inside the backward pass, as soon as its gradient is complete,
    /// and free that gradient at once, when a step is one micro-batch (a step cut in several
    /// accumulates as usual). Needs `clip = 0` and no f16 loss scaling, which need every
    /// gradient before any update. Unset: the memory policy chooses (off under
    /// `memory.policy = "manual"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_backward: Option<bool>,
    /// Shard the optimizer's state over the ranks of a data-parallel run (ZeRO stage 1): each
    /// rank keeps the state of its share of the parameters, updates those and sends them to
    /// the others. A run of one process keeps all of it. Not with `in_backward`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shard_state: bool,
    /// This process's rank and the number of ranks, as the launcher started it: set at launch,
    /// never read from or written to a file. With `shard_state` it decides which share of the
    /// state the optimizer keeps.
    #[serde(skip)]
    pub launched_as: Option<(usize, usize)>,
    /// `constant` or `warmup-cosine`.
    pub schedule: ScheduleKind,
    /// Warmup steps.
    pub warmup: u64,
    /// The last learning rate of the cosine, as a fraction of `lr`.
    pub min_lr_ratio: f64,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        Self {
            kind: OptimizerKind::Adamw,
            lr: 3e-3,
            weight_decay: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            momentum: 0.9,
            clip: 1.0,
            state: None,
            in_backward: None,
            shard_state: false,
            launched_as: None,
            schedule: ScheduleKind::WarmupCosine,
            warmup: 50,
            min_lr_ratio: 0.1,
        }
    }
}

/// The optimizers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerKind {
    /// AdamW.
    Adamw,
    /// SGD with momentum.
    Sgd,
}

/// Whether the memory policy chooses the techniques a configuration leaves unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// The planner chooses by predicted step time among what fits.
    #[default]
    Auto,
    /// Unset techniques are off: no recomputation, f32 state, updates after the backward pass.
    Manual,
}

/// How an optimizer keeps its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StateKind {
    /// In the parameters' dtype.
    #[default]
    F32,
    /// bf16, rounded stochastically.
    Bf16,
    /// Block-wise 8-bit (Dettmers et al. 2022), rounded stochastically.
    Int8,
}

impl StateKind {
    /// The optimizers' name for it.
    pub fn precision(self) -> headroom_nn::StatePrecision {
        match self {
            StateKind::F32 => headroom_nn::StatePrecision::Full,
            StateKind::Bf16 => headroom_nn::StatePrecision::Bf16,
            StateKind::Int8 => headroom_nn::StatePrecision::Int8,
        }
    }
}

/// The schedules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleKind {
    /// The same rate throughout.
    Constant,
    /// Linear warmup, then cosine decay to `min_lr_ratio * lr`.
    WarmupCosine,
}

/// Mixed precision and loss scaling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrecisionConfig {
    /// `f32`, `bf16` or `f16` for matrix products (weights stay f32).
    pub dtype: PrecisionKind,
    /// f16: the first loss scale.
    pub loss_scale: f64,
    /// f16: clean steps before the scale grows.
    pub growth_interval: u64,
    /// f16: the growth factor.
    pub growth_factor: f64,
    /// f16: the factor on an overflow.
    pub backoff_factor: f64,
}

impl Default for PrecisionConfig {
    fn default() -> Self {
        Self {
            dtype: PrecisionKind::F32,
            loss_scale: 65536.0,
            growth_interval: 2000,
            growth_factor: 2.0,
            backoff_factor: 0.5,
        }
    }
}

/// The precisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PrecisionKind {
    /// Everything in f32.
    F32,
    /// Products in bf16 (no loss scaling needed).
    Bf16,
    /// Products in f16, with dynamic loss scaling.
    F16,
}

/// How much memory the run may use, and how it is reserved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// Which memory techniques the planner chooses: `auto` (the default) searches
    /// recomputation, the optimizer step in the backward pass and the optimizer state's
    /// precision for the fastest predicted step that fits, keeping those the configuration
    /// sets; `manual` leaves the unset ones off.
    pub policy: PolicyKind,
    /// The rates the planner predicts step times at: `fixed` (the same plans on every machine)
    /// or `calibrated` (this machine's, measured by `headroom plan --calibrate`).
    pub rates: crate::rates::RatesKind,
    /// The simulated device's memory on the CPU, e.g. `8GiB` (a GPU's is what its driver
    /// reports). Sizes are text with a unit or a whole number of bytes.
    #[serde(deserialize_with = "size_text::size")]
    pub capacity: String,
    /// The old name of `capacity`, still read (with a warning when read from a file), never
    /// written.
    #[serde(skip_serializing, deserialize_with = "size_text::optional_size")]
    pub device: Option<String>,
    /// The most the run may use, e.g. `48MiB` (TensorFlow's `memory_limit`); without a limit
    /// or a fraction, the whole device (the simulated device's capacity on the CPU), except for
    /// the addition task on the CPU, whose own default is [`ADDITION_LIMIT`].
    #[serde(deserialize_with = "size_text::optional_size")]
    pub limit: Option<String>,
    /// Or a fraction of the device's memory (PyTorch's memory fraction).
    pub fraction: Option<f64>,
    /// Reserve the whole limit up front instead of growing on demand.
    pub preallocate: bool,
    /// One region that grows and shrinks in place a page at a time (PyTorch's
    /// `expandable_segments:True`), by name: growth on demand already does this wherever memory
    /// can be mapped (a GPU, host memory on Linux); elsewhere this grows by regions of the
    /// request rounded up to 2 MiB instead of PyTorch's segments.
    pub expandable_segments: bool,
    /// Allocator events kept for the run's Perfetto trace (`memory-trace.json`): the newest
    /// ones, and every out-of-memory.
    pub history: usize,
    /// Stream every allocation and free to `allocations-<n>.jsonl` in the run directory (one
    /// file per start of a process), for `headroom replay RUN_DIR`.
    pub trace: bool,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            capacity: "8GiB".into(),
            device: None,
            limit: None,
            fraction: None,
            policy: PolicyKind::Auto,
            rates: crate::rates::RatesKind::Fixed,
            preallocate: false,
            expandable_segments: false,
            history: 200_000,
            trace: true,
        }
    }
}

/// When checkpoints are written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Every this many steps (0: only at the end).
    pub every: u64,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self { every: 500 }
    }
}

impl TrainConfig {
    /// Reads a TOML file; every setting it leaves out keeps its default, or its preset's.
    pub fn from_toml_file(path: &std::path::Path) -> crate::Result<Self> {
        Self::from_toml_file_over(path, None)
    }

    /// Reads a TOML file over `preset` (or the file's own `model.preset`): what the file sets
    /// wins over the preset, which wins over the defaults.
    pub fn from_toml_file_over(
        path: &std::path::Path,
        preset: Option<Preset>,
    ) -> crate::Result<Self> {
        let text = std::fs::read_to_string(path).map_err(crate::Error::io(path))?;
        let mut config =
            Self::from_toml_over(&text, preset).map_err(|err| crate::Error::Config {
                problems: vec![format!("{}: {err}", path.display())],
            })?;
        if let Some(old) = &config.memory.device {
            tracing::warn!(
                "{}: memory.device is now called memory.capacity; the old name will go",
                path.display()
            );
            // Given alone, it is the capacity; given with it, validation names the conflict.
            if config.memory.capacity == MemoryConfig::default().capacity {
                config.memory.capacity = old.clone();
                config.memory.device = None;
            }
        }
        Ok(config)
    }

    /// The keys a TOML configuration file writes in its `[model]` table.
    pub fn written_model_keys(path: &std::path::Path) -> crate::Result<Vec<String>> {
        let text = std::fs::read_to_string(path).map_err(crate::Error::io(path))?;
        let table: toml::Table = toml::from_str(&text).map_err(|err| crate::Error::Config {
            problems: vec![format!("{}: {err}", path.display())],
        })?;
        Ok(match table.get("model") {
            Some(toml::Value::Table(model)) => model.keys().cloned().collect(),
            _ => Vec::new(),
        })
    }

    /// The defaults, with the model `preset` names when one is given.
    pub fn over(preset: Option<Preset>) -> Self {
        let mut config = Self::default();
        if let Some(preset) = preset {
            config.model = ModelConfig::preset(preset);
        }
        config
    }

    /// Parses TOML `text` over `preset` (or the text's own `model.preset`): each field it
    /// writes wins over the preset's, which wins over the default.
    pub fn from_toml_over(text: &str, preset: Option<Preset>) -> Result<Self, String> {
        let written: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
        let named = written
            .get("model")
            .and_then(|m| m.get("preset"))
            .and_then(|p| p.as_str())
            .and_then(|p| Preset::deserialize(toml::Value::String(p.to_owned())).ok());
        let Some(preset) = preset.or(named) else {
            return toml::from_str(text).map_err(|e| e.to_string());
        };
        let mut merged =
            toml::Table::try_from(Self::over(Some(preset))).map_err(|e| e.to_string())?;
        merge(&mut merged, written);
        merged
            .try_into()
            .map_err(|e: toml::de::Error| e.to_string())
    }

    /// The tokenizer of the run's text, which the run directory keeps a copy of: the prepared
    /// data's, or else the pretrained model's.
    pub fn tokenizer(&self) -> Option<PathBuf> {
        let data = match self.data.kind {
            DataKind::TokenShards => self.data.path.as_ref(),
            _ => None,
        };
        data.into_iter()
            .chain(&self.model.init_from)
            .map(|dir| dir.join(crate::shards::TOKENIZER))
            .find(|path| path.is_file())
    }

    /// The configuration as TOML (written into the run directory).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|err| format!("# not representable: {err}\n"))
    }
}

/// Writes every key of `over` into `base`, tables key by key.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(value)) => merge(inner, value),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Writes each setting's value as files and flags write it (`gpt`, `bf16`, `token-shards`), for
/// messages.
macro_rules! display_as_written {
    ($($kind:ty { $($variant:ident => $name:literal),+ $(,)? })+) => {$(
        impl std::fmt::Display for $kind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(match self { $(Self::$variant => $name),+ })
            }
        }
    )+};
}

display_as_written! {
    ModelKind { Gpt => "gpt", Mlp => "mlp" }
    StateKind { F32 => "f32", Bf16 => "bf16", Int8 => "int8" }
    PrecisionKind { F32 => "f32", Bf16 => "bf16", F16 => "f16" }
    Recompute { None => "none", Cheap => "cheap", Blocks => "blocks" }
    OptimizerKind { Adamw => "adamw", Sgd => "sgd" }
}

impl std::fmt::Display for DataKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}
