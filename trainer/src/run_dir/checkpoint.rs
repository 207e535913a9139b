//! Checkpoints of a run: the weights and optimizer state (safetensors, through headroom-nn),
//! the trainer's own state as JSON metadata (step, data position, micro-batch and loss-scaler
//! state, the dropout counter, the run's totals) and the run's configuration as TOML, which a
//! resumed run is checked against. A state that could not have been saved (a micro-batch of 0,
//! more steps than samples drawn) is refused, naming the field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use headroom_kernels::Device;
use headroom_nn::checkpoint::{self, HostState, ShardIndex};
use headroom_nn::{Module, Optimizer};
use serde::{Deserialize, Serialize};

use crate::config::TrainConfig;
use crate::data::Position;
use crate::error::{Error, Result};
use crate::model::TrainableModel;
use crate::run_dir::totals::Totals;
use crate::step::micro::MicroBatcher;
use crate::step::precision::LossScaler;

/// The metadata key of the trainer's state.
const KEY: &str = "headroom.trainer";

/// The metadata key of the run's configuration.
pub(crate) const CONFIG_KEY: &str = "headroom.config";

/// The file a run directory's checkpoint lives in.
pub fn checkpoint_path(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoint.safetensors")
}

/// Everything besides weights and optimizer state that a resumed run needs to continue the
/// same trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainerState {
    /// Steps done.
    pub step: u64,
    /// The position of the next batch.
    pub next: Position,
    /// The micro-batch size and its history.
    pub micro: MicroBatcher,
    /// The loss scaler.
    pub scaler: LossScaler,
    /// Dropout masks drawn.
    pub dropout_calls: u64,
    /// The planner's prediction, kept for the summary.
    pub predicted_peak: Option<u64>,
    /// A GPT's fused head: the rows it forms logits for at a time, as the plan or the
    /// configuration chose them (none: the model's default). Kept so that a resumed run
    /// chunks as the run before it did.
    #[serde(default)]
    pub head_chunk: Option<usize>,
    /// What the run has done up to `step`.
    pub totals: Totals,
}

impl TrainerState {
    /// Checks that the state could have been saved by a run over `samples` training samples;
    /// the error names the first field that could not.
    pub fn check(&self, samples: usize) -> std::result::Result<(), String> {
        self.micro.check().map_err(|e| format!("micro: {e}"))?;
        let samples = samples as u64;
        if self.next.offset >= samples.max(1) {
            return Err(format!(
                "next.offset: sample {} of an epoch of {samples}",
                self.next.offset
            ));
        }
        let drawn = self.next.epoch.saturating_mul(samples) + self.next.offset;
        if self.step > self.totals.samples || self.totals.samples > drawn {
            return Err(format!(
                "step: {} steps over {} samples, with {drawn} samples drawn from the data",
                self.step, self.totals.samples
            ));
        }
        if !(self.scaler.scale.is_finite() && self.scaler.scale >= 1.0) {
            return Err(format!("scaler.scale: {}", self.scaler.scale));
        }
        Ok(())
    }
}

/// Writes the checkpoint atomically.
pub fn save(
    path: &Path,
    model: &dyn Module,
    optimizer: &HostState,
    state: &TrainerState,
    config: &TrainConfig,
) -> Result<()> {
    Ok(checkpoint::save_with_state(
        path,
        model,
        Some(optimizer),
        &metadata(path, state, config)?,
    )?)
}

/// Commits the checkpoint whose rank files `index` names (the optimizer at `steps` updates)
/// by writing the index at `path` atomically, with the run's state and configuration.
pub fn save_index(
    path: &Path,
    (index, steps): (&ShardIndex, u64),
    state: &TrainerState,
    config: &TrainConfig,
) -> Result<()> {
    Ok(index.save(path, steps, &metadata(path, state, config)?)?)
}

/// The metadata a checkpoint at `path` holds: the trainer's state and the configuration.
fn metadata(
    path: &Path,
    state: &TrainerState,
    config: &TrainConfig,
) -> Result<BTreeMap<String, String>> {
    let json = serde_json::to_string(state).map_err(|e| Error::io(path)(e.into()))?;
    Ok(BTreeMap::from([
        (KEY.to_owned(), json),
        (CONFIG_KEY.to_owned(), config.to_toml()),
    ]))
}

/// The state and configuration a checkpoint holds, read and checked before anything is
/// restored from it.
pub struct Saved {
    checkpoint: checkpoint::Checkpoint,
    /// The trainer's state.
    pub state: TrainerState,
    /// The configuration of the run that saved it (none in checkpoints written before it was
    /// saved).
    pub config: Option<TrainConfig>,
}

/// Reads the checkpoint at `path` for a device, and checks its trainer state against a run
/// over `samples` training samples.
pub fn load(path: &Path, device: &Device, samples: usize) -> Result<Saved> {
    let saved = checkpoint::load(path, device)?;
    let json = saved
        .metadata()
        .get(KEY)
        .ok_or_else(|| headroom_nn::Error::Checkpoint {
            path: path.to_owned(),
            key: KEY.into(),
            detail: "missing: not a checkpoint of a headroom run".into(),
        })?;
    let state: TrainerState =
        serde_json::from_str(json).map_err(|err| headroom_nn::Error::Checkpoint {
            path: path.to_owned(),
            key: KEY.into(),
            detail: err.to_string(),
        })?;
    state
        .check(samples)
        .map_err(|detail| headroom_nn::Error::Checkpoint {
            path: path.to_owned(),
            key: KEY.into(),
            detail: format!("{detail}: not a state a run saves"),
        })?;
    let config = saved_config(saved.metadata(), path)?;
    Ok(Saved {
        checkpoint: saved,
        state,
        config,
    })
}

/// The configuration of the run that saved the checkpoint at `path`, from its `metadata`; none
/// in checkpoints written before it was saved.
pub fn saved_config(
    metadata: &BTreeMap<String, String>,
    path: &Path,
) -> Result<Option<TrainConfig>> {
    let Some(text) = metadata.get(CONFIG_KEY) else {
        return Ok(None);
    };
    let config = toml::from_str(text).map_err(|err| headroom_nn::Error::Checkpoint {
        path: path.to_owned(),
        key: CONFIG_KEY.into(),
        detail: err.to_string(),
    })?;
    Ok(Some(config))
}

impl Saved {
    /// Restores the weights, the optimizer state and the dropout counter.
    pub fn restore(
        &self,
        model: &mut dyn TrainableModel,
        optimizer: &mut dyn Optimizer,
    ) -> Result<()> {
        self.checkpoint.restore_model(model.module_mut())?;
        self.checkpoint.restore_optimizer(optimizer)?;
        self.restore_dropout(model);
        Ok(())
    }

    /// Sets `model`'s dropout counter to where the saved run's stood, so that it draws the same
    /// masks.
    fn restore_dropout(&self, model: &dyn TrainableModel) {
        if let Some(counter) = model.dropout_counter() {
            counter.set(self.state.dropout_calls);
        }
    }

    /// Restores the weights alone: a model whose tensors are to be sharded takes them whole,
    /// before they are cut.
    pub fn restore_weights(&self, model: &mut dyn TrainableModel) -> Result<()> {
        Ok(self.checkpoint.restore_model(model.module_mut())?)
    }

    /// Restores the weights into a model whose parameters are sharded already, each saved
    /// tensor read whole and cut to the rank's chunk, one at a time.
    pub fn restore_weights_in_chunks(&self, model: &mut dyn TrainableModel) -> Result<()> {
        let shards = model.param_shards().cloned().ok_or_else(|| {
            Error::config("checkpoint: the model's parameters are not sharded over ranks")
        })?;
        Ok(self
            .checkpoint
            .restore_model_in_chunks(model.module_mut(), &shards)?)
    }

    /// Restores the optimizer state, chunk `rank` of `ranks` of each saved buffer as the
    /// sharded parameters it goes with, and the dropout counter.
    pub fn restore_state_in_chunks(
        &self,
        model: &dyn TrainableModel,
        optimizer: &mut dyn Optimizer,
        chunk: (usize, usize),
    ) -> Result<()> {
        self.checkpoint
            .restore_optimizer_in_chunks(optimizer, chunk)?;
        self.restore_dropout(model);
        Ok(())
    }
}
