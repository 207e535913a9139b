//! The longest context a model trains at a micro-batch of one under a limit, the third part of
//! `fit-compare` (`--longest-context`): the memory policy chooses among every technique
//! (recomputation with tiled MLPs, the host tier for activations and the optimizer, the
//! state's precision), contexts are tried in steps of [`STEP`] tokens (doubling, then
//! bisecting), and the longest that fits can be confirmed by one real step, its peak against
//! the prediction. The peer is `torch_fit.py --longest-context` (transformers with gradient
//! checkpointing).

use headroom_trainer::Result;
use headroom_trainer::config::{PrecisionKind, Preset, TrainConfig};

use crate::fit_limits::{Subject, Techniques, config, largest_fitting, whole_batch_policy};

/// Contexts are tried in multiples of this many tokens.
pub const STEP: usize = 1024;

/// The longest context found, and how it fits.
#[derive(Debug, Clone)]
pub struct Longest {
    /// Tokens per sample.
    pub context: usize,
    /// The predicted peak of its step on the device.
    pub predicted_peak: u64,
    /// The techniques the memory policy chose, in words.
    pub policy: String,
    /// Its step's configuration, with those techniques pinned (to confirm it by a real step).
    pub config: TrainConfig,
}

/// The longest context, a multiple of [`STEP`] up to `most`, whose step of one sample of
/// `preset` fits `limit` on `device` in `precision`; none when not even [`STEP`] tokens do.
pub fn longest_context(
    device: &str,
    preset: Preset,
    precision: PrecisionKind,
    limit: u64,
    most: usize,
) -> Result<Option<Longest>> {
    let fits = |steps: usize| -> Result<Option<Longest>> {
        let subject = Subject {
            preset,
            context: Some(steps * STEP),
        };
        let mut config = config(device, subject, precision, 1, limit, Techniques::Any);
        // A window needs a sample of its own: uniform tokens make as many as asked.
        config.data.train_size = 2;
        let Some((policy, predicted_peak)) = whole_batch_policy(&config)? else {
            return Ok(None);
        };
        policy.apply(&mut config);
        Ok(Some(Longest {
            context: steps * STEP,
            predicted_peak,
            policy: policy.describe(),
            config,
        }))
    };
    let found = largest_fitting((most / STEP).max(1), fits)?;
    Ok(found.map(|(_, longest)| longest))
}
