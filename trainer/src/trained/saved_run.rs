//! A run's model opened for use (generation, evaluation, export): the configuration its
//! checkpoint was saved with, a device under that run's memory settings or the caller's, and
//! the trained weights. The optimizer state stays on disk.

use std::path::{Path, PathBuf};

use headroom_alloc::ByteSize;
use headroom_kernels::Device;
use headroom_nn::checkpoint::{self, Header};

use crate::config::{ModelFamily, ModelKind, TrainConfig};
use crate::data::shards::TOKENIZER;
use crate::data::{DataShape, TokenShape};
use crate::error::{Error, Result};
use crate::model::{BuiltinModel, ModelFactory, TrainModel};
use crate::planning::run_device;
use crate::run_dir::checkpoint::{CONFIG_KEY, checkpoint_path, saved_config};

/// Where and in how much memory a saved model runs, when not as its run trained.
#[derive(Debug, Clone, Default)]
pub struct UseSettings {
    /// The device: `cpu`, `cuda` or `cuda:N`.
    pub device: Option<String>,
    /// The most memory it may use, e.g. `2GiB`.
    pub memory_limit: Option<ByteSize>,
}

impl UseSettings {
    /// `config` on the device and under the memory limit these name, where they name one.
    fn apply(&self, config: &mut TrainConfig) {
        if let Some(device) = &self.device {
            config.device = device.clone();
        }
        if let Some(limit) = &self.memory_limit {
            config.memory.limit = Some(limit.clone());
            config.memory.fraction = None;
        }
    }
}

/// A run's trained model, on a device.
pub struct SavedRun {
    /// The run directory.
    pub run_dir: PathBuf,
    /// The run's configuration, with the caller's device and memory settings.
    pub config: TrainConfig,
    /// The device the model is on.
    pub device: Device,
    /// The trained model.
    pub model: TrainModel,
}

impl SavedRun {
    /// The configuration `run_dir`'s checkpoint was saved with.
    pub fn config_of(run_dir: &Path) -> Result<TrainConfig> {
        let path = existing_checkpoint(run_dir)?;
        config_in(&Header::read(&path)?, &path)
    }

    /// The configuration of `dir`'s model: its run's, or for a Hugging Face model directory
    /// (or a Hub id in the local cache, or a GGUF file) the configuration that starts from it.
    pub fn config_of_model(dir: &Path) -> Result<TrainConfig> {
        match pretrained_model(dir) {
            Some(pretrained) => pretrained_config(&pretrained),
            None => Self::config_of(dir),
        }
    }

    /// Opens the model of `run_dir`'s checkpoint. A GPT's vocabulary and context come from its
    /// saved weights; an MLP needs the data's `shape`.
    ///
    /// `run_dir` may also be a Hugging Face model directory (or a Hub id in the local cache, or
    /// a GGUF file):
    /// its model opens as it was published, with its whole context, its weights loaded once
    /// into the model's own memory.
    pub fn open(run_dir: &Path, settings: &UseSettings, shape: Option<DataShape>) -> Result<Self> {
        if let Some(pretrained) = pretrained_model(run_dir) {
            return Self::open_pretrained(&pretrained, settings);
        }
        let path = existing_checkpoint(run_dir)?;
        let header = Header::read(&path)?;
        let mut config = config_in(&header, &path)?;
        // A LoRA run's checkpoint holds its adapters alone: its base comes from where the run
        // took it.
        if config.model.lora.is_none() {
            config.model.init_from = None;
        }
        settings.apply(&mut config);
        config.memory.trace = false;
        config.model.recompute = None;
        let shape = match (config.model.kind, shape) {
            (_, Some(shape)) => shape,
            (ModelKind::Gpt, None) if config.model.lora.is_some() => {
                let unsaved = |what: &str| Error::Data {
                    path: path.clone(),
                    detail: format!(
                        "a LoRA checkpoint holds the adapters alone, and the run's \
                         configuration names no {what}"
                    ),
                };
                let vocab = config.model.vocab.ok_or_else(|| unsaved("vocabulary"))?;
                let len = match config.model.family {
                    ModelFamily::Gpt2 => config.model.context.ok_or_else(|| unsaved("context"))?,
                    ModelFamily::Llama | ModelFamily::Gemma3 => {
                        config.model.window(config.data.context)
                    }
                };
                DataShape::tokens(vocab, len)
            }
            (ModelKind::Gpt, None) => {
                let rows = |key: &str| {
                    header
                        .shapes
                        .get(key)
                        .and_then(|dims| dims.first().copied())
                        .ok_or_else(|| Error::Data {
                            path: path.clone(),
                            detail: format!("holds no {key}: not a checkpoint of a GPT"),
                        })
                };
                // A GPT-2's positions are a table of its context; a rotary model's context is
                // the window it trained on.
                let len = match config.model.family {
                    ModelFamily::Gpt2 => rows("pos_emb.weight")?,
                    ModelFamily::Llama | ModelFamily::Gemma3 => {
                        config.model.window(config.data.context)
                    }
                };
                DataShape::tokens(rows("tok_emb.weight")?, len)
            }
            (ModelKind::Mlp, None) => {
                return Err(Error::config(
                    "an MLP's input width and classes come from its data: give the data",
                ));
            }
        };
        if let Some(TokenShape { vocab, len }) = shape.as_tokens() {
            config.model.vocab = Some(vocab);
            config.model.context = Some(config.model.context.unwrap_or(len));
        }
        let budget = run_device::budget(&config)?;
        let device = run_device::open(&config, &budget)?;
        let mut model = TrainModel::build(&config.model, &shape, &device, (config.seed, None))?;
        if config.model.lora.is_some() {
            // The checkpoint holds the adapters alone: the base as the run started from it.
            BuiltinModel(config.model.clone()).initialize(&mut model)?;
        }
        let saved = checkpoint::load(&path, &device)?;
        saved.restore_model(model.module_mut())?;
        model.module_mut().set_training(false);
        Ok(Self {
            run_dir: run_dir.to_owned(),
            config,
            device,
            model,
        })
    }

    /// The model of the Hugging Face directory `dir`, as published.
    fn open_pretrained(dir: &Path, settings: &UseSettings) -> Result<Self> {
        let mut config = pretrained_config(dir)?;
        settings.apply(&mut config);
        let vocab = config.model.vocab.unwrap_or_default();
        let context = config.model.context.unwrap_or_default();
        let shape = DataShape::tokens(vocab, context);
        let budget = run_device::budget(&config)?;
        let device = run_device::open(&config, &budget)?;
        let mut model = TrainModel::build(&config.model, &shape, &device, (config.seed, None))?;
        BuiltinModel(config.model.clone()).initialize(&mut model)?;
        model.module_mut().set_training(false);
        Ok(Self {
            run_dir: dir.to_owned(),
            config,
            device,
            model,
        })
    }

    /// The run's tokenizer: `tokenizer.json` in the run directory (copied there from the data
    /// or the pretrained model when the run started), or a GGUF file opened as a model.
    pub fn tokenizer_path(&self) -> PathBuf {
        model_tokenizer(&self.run_dir)
    }
}

/// The tokenizer of the model `dir` names: its `tokenizer.json`, or a GGUF file itself (whose
/// metadata holds it).
pub fn model_tokenizer(dir: &Path) -> PathBuf {
    match headroom_nn::gguf::is_gguf(dir) {
        true => dir.to_owned(),
        false => dir.join(TOKENIZER),
    }
}

/// The Hugging Face model directory `dir` names (itself, a cache entry's snapshot, or a Hub id
/// found in the local cache), where it holds no run's checkpoint but a model's `config.json`;
/// or `dir` itself where it is a GGUF file.
pub fn pretrained_model(dir: &Path) -> Option<PathBuf> {
    if headroom_nn::gguf::is_gguf(dir) {
        return Some(dir.to_owned());
    }
    if checkpoint_path(dir).is_file() {
        return None;
    }
    let found = headroom_nn::hf::model_dir(dir).ok()?;
    found
        .join(headroom_nn::hf::CONFIG_FILE)
        .is_file()
        .then_some(found)
}

/// The configuration that uses the pretrained model in `dir` as published: its shape, its
/// whole context, f32 parameters (as `train --init-from` starts).
fn pretrained_config(dir: &Path) -> Result<TrainConfig> {
    let overrides = crate::config::Overrides {
        init_from: Some(dir.to_owned()),
        ..Default::default()
    };
    let mut config = overrides.configure(None)?;
    let pretrained = headroom_nn::hf::Pretrained::read(dir)?;
    let context = pretrained.gpt_config(0.0).context;
    config.model.context = Some(config.model.context.unwrap_or(context));
    config.model.dropout = 0.0;
    // Text, so that no task's own memory limit applies; what data it reads is the caller's.
    config.data.kind = crate::config::DataKind::TokenShards;
    config.memory.trace = false;
    config.run_dir = Some(dir.to_owned());
    Ok(config)
}

/// The checkpoint of `run_dir`, which must exist.
fn existing_checkpoint(run_dir: &Path) -> Result<PathBuf> {
    let path = checkpoint_path(run_dir);
    if path.is_file() {
        return Ok(path);
    }
    Err(Error::Data {
        path,
        detail: "missing: the directory holds no checkpoint of a headroom run".into(),
    })
}

/// The configuration saved with the checkpoint at `path`, whose header is `header`.
fn config_in(header: &Header, path: &Path) -> Result<TrainConfig> {
    saved_config(&header.metadata, path)?.ok_or_else(|| Error::Data {
        path: path.to_owned(),
        detail: format!("holds no {CONFIG_KEY}: it was written before runs saved theirs"),
    })
}
