//! What keeps a fine-tuned model the model it came from when it leaves Headroom: the base's
//! tokenizer and generation files (special tokens, chat template, generation defaults) and
//! its special token ids, which the run directory keeps from its start.

use std::path::{Path, PathBuf};

use headroom_nn::hf::{COMPANION_FILES, SpecialTokens, copy_companion};

use crate::config::TrainConfig;
use crate::error::Result;

/// Where a run's identity files are found, the first first: its run directory (where the
/// run copied them as it started), then its pretrained model.
pub fn identity_sources(run_dir: &Path, config: &TrainConfig) -> Vec<PathBuf> {
    let mut sources = vec![run_dir.to_owned()];
    sources.extend(config.pretrained_dir());
    sources
}

/// The special token ids of the first of `sources` that names any.
pub fn special_tokens(sources: &[PathBuf]) -> Result<SpecialTokens> {
    for source in sources {
        let tokens = SpecialTokens::read(source)?;
        if !tokens.is_empty() {
            return Ok(tokens);
        }
    }
    Ok(SpecialTokens::default())
}

/// Copies into `out` each tokenizer and generation file of `sources`, from the first source
/// that holds it; returns the names copied.
pub fn carry_companions(sources: &[PathBuf], out: &Path) -> Result<Vec<&'static str>> {
    let mut carried = Vec::new();
    for &name in COMPANION_FILES {
        if let Some(source) = sources.iter().find(|s| s.join(name).is_file()) {
            copy_companion(source, name, out)?;
            carried.push(name);
        }
    }
    Ok(carried)
}
