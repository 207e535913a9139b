//! Checkpoints of a run: the weights and optimizer state (safetensors, through headroom-nn),
//! and the trainer's own state as JSON metadata: step, data position, micro-batch and
//! loss-scaler state, and the dropout counter.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use headroom_kernels::Device;
use headroom_nn::{Optimizer, checkpoint};
use serde::{Deserialize, Serialize};

use crate::data::Position;
use crate::error::{Error, Result};
use crate::micro::MicroBatcher;
use crate::model::TrainModel;
use crate::precision::LossScaler;

/// The metadata key of the trainer's state.
const KEY: &str = "headroom.trainer";

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
}

/// Writes the checkpoint atomically.
pub fn save(
    path: &Path,
    model: &TrainModel,
    optimizer: &dyn Optimizer,
    state: &TrainerState,
) -> Result<()> {
    let json = serde_json::to_string(state).map_err(|e| Error::io(path)(e.into()))?;
    let metadata = BTreeMap::from([(KEY.to_owned(), json)]);
    Ok(checkpoint::save(
        path,
        model.module(),
        Some(optimizer),
        &metadata,
    )?)
}

/// Restores the weights and optimizer state from `path` and returns the trainer's state.
pub fn restore(
    path: &Path,
    device: &Device,
    model: &mut TrainModel,
    optimizer: &mut dyn Optimizer,
) -> Result<TrainerState> {
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
    saved.restore_model(model.module_mut())?;
    saved.restore_optimizer(optimizer)?;
    if let Some(counter) = model.dropout_counter() {
        counter.set(state.dropout_calls);
    }
    Ok(state)
}
