//! A run's configuration: read from TOML, overridden by command-line flags, validated before
//! anything is built; and the task its data section describes (`task.rs`).

mod batch;
mod data;
mod device_choice;
mod distributed;
mod link_bandwidth;
mod memory_settings;
mod model;
mod model_family;
mod optimizer;
mod overrides;
mod param_dtype;
mod paths;
mod precision;
mod pretrained;
mod task;
mod validate;
mod warmup;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use batch::BatchConfig;
pub use data::{DataConfig, DataKind};
pub use device_choice::DeviceChoice;
pub use distributed::{DistributedConfig, ShardLevel};
pub use headroom_nn::models::Preset;
pub use headroom_nn::models::gpt2::GPT2_VOCAB;
pub use link_bandwidth::{LinkBandwidth, NAMED_LINKS};
pub use memory_settings::{CheckpointConfig, MemoryConfig, PolicyKind, RatesKind};
pub use model::{ModelConfig, ModelKind, Recompute};
pub use model_family::ModelFamily;
pub use optimizer::{OptimizerConfig, OptimizerKind, ScheduleKind, StateKind};
pub use overrides::Overrides;
pub use param_dtype::ParamDtype;
pub use precision::{PrecisionConfig, PrecisionKind};
use validate::Problems;
pub use warmup::{DEFAULT_WARMUP, Warmup};

/// Steps of a run that names neither steps nor epochs.
pub const DEFAULT_STEPS: u64 = 1500;

/// The fraction of the limit the planner keeps free when the configuration sets none.
pub const DEFAULT_MARGIN: f64 = 0.1;

/// The memory limit of an addition run (the default task) that names neither a limit nor a
/// fraction: small enough that the default GPT's batch does not fit in one micro-batch, so the
/// planner's choice matters. Other runs may use the whole device by default.
pub const ADDITION_LIMIT: u64 = 24 << 20;

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
    /// What the ranks of a run shard ([`DistributedConfig::shard`], read into the
    /// optimizer's settings as the configuration is read).
    #[serde(skip_serializing_if = "DistributedConfig::is_unset")]
    pub distributed: DistributedConfig,
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
            distributed: DistributedConfig::default(),
            precision: PrecisionConfig::default(),
            memory: MemoryConfig::default(),
            checkpoint: CheckpointConfig::default(),
        }
    }
}

impl TrainConfig {
    /// Reads a TOML file; every setting it leaves out keeps its default, or its preset's.
    pub fn from_toml_file(path: &std::path::Path) -> crate::error::Result<Self> {
        Self::from_toml_file_over(path, None)
    }

    /// Reads a TOML file over `preset` (or the file's own `model.preset`): what the file sets
    /// wins over the preset, which wins over the defaults.
    pub fn from_toml_file_over(
        path: &std::path::Path,
        preset: Option<Preset>,
    ) -> crate::error::Result<Self> {
        let text = std::fs::read_to_string(path).map_err(crate::error::Error::io(path))?;
        let mut config =
            Self::from_toml_over(&text, preset).map_err(|err| crate::error::Error::Config {
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
    pub fn written_model_keys(path: &std::path::Path) -> crate::error::Result<Vec<String>> {
        Ok(match read_table(path)?.get("model") {
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
    /// writes wins over the preset's, which wins over the default. `distributed.shard` is
    /// read into the optimizer's settings ([`TrainConfig::apply_distributed`]).
    pub fn from_toml_over(text: &str, preset: Option<Preset>) -> Result<Self, String> {
        let mut config = Self::parsed_over(text, preset)?;
        config.apply_distributed();
        Ok(config)
    }

    /// Sets the optimizer's settings that `distributed.shard` stands for, where it is set.
    pub fn apply_distributed(&mut self) {
        if let Some(level) = self.distributed.shard {
            level.apply(&mut self.optimizer);
        }
    }

    /// [`TrainConfig::from_toml_over`] as written.
    fn parsed_over(text: &str, preset: Option<Preset>) -> Result<Self, String> {
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
        data.cloned()
            .into_iter()
            .chain(self.pretrained_dir())
            .map(|dir| dir.join(crate::data::shards::TOKENIZER))
            .find(|path| path.is_file())
    }

    /// The directory of the pretrained model's files (`model.init_from`, a Hugging Face cache
    /// entry's snapshot or a Hub id found in the cache), when the run starts from one.
    pub fn pretrained_dir(&self) -> Option<PathBuf> {
        let given = self.model.init_from.as_ref()?;
        Some(headroom_nn::hf::model_dir(given).unwrap_or_else(|_| given.clone()))
    }

    /// The configuration as TOML (written into the run directory).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|err| format!("# not representable: {err}\n"))
    }
}

/// A TOML file's table, its syntax checked but not its settings.
fn read_table(path: &std::path::Path) -> crate::error::Result<toml::Table> {
    let text = std::fs::read_to_string(path).map_err(crate::error::Error::io(path))?;
    toml::from_str(&text).map_err(|err| crate::error::Error::Config {
        problems: vec![format!("{}: {err}", path.display())],
    })
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
    Recompute { None => "none", Cheap => "cheap", CheapUp => "cheap-up", Blocks => "blocks",
        BlocksTiled => "blocks-tiled" }
    OptimizerKind { Adamw => "adamw", Sgd => "sgd" }
}

impl std::fmt::Display for DataKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}
