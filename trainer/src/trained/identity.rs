//! What keeps a fine-tuned model the model it came from when it leaves Headroom: the base's
//! tokenizer and generation files (special tokens, chat template, generation defaults) and
//! its special token ids, which the run directory keeps from its start.

use std::path::{Path, PathBuf};

use headroom_nn::hf::{COMPANION_FILES, SpecialTokens, copy_companions};

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

/// Copies into `out` each tokenizer and generation file of `sources`, the first source's
/// where several hold one; returns the names copied.
pub fn carry_companions(sources: &[PathBuf], out: &Path) -> Result<Vec<&'static str>> {
    let mut carried = Vec::new();
    for source in sources.iter().rev() {
        carried.extend(copy_companions(source, out)?);
    }
    let mut names: Vec<&'static str> = COMPANION_FILES
        .iter()
        .copied()
        .filter(|name| carried.contains(name))
        .collect();
    names.dedup();
    Ok(names)
}
