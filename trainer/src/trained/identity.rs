//! What keeps a fine-tuned model the model it came from when it leaves Headroom: the base's
//! tokenizer and generation files (special tokens, chat template, generation defaults) and
//! its special token ids, which the run directory keeps from its start (a GGUF base's written
//! from its metadata).

use std::path::{Path, PathBuf};

use headroom_nn::gguf::is_gguf;
use headroom_nn::hf::{COMPANION_FILES, SpecialTokens, copy_companion};

use super::gguf_identity::gguf_identity;
use crate::atomic_file::write_atomically;
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
/// that holds it (a GGUF file holds those its metadata writes, [`gguf_identity`]); returns the
/// names copied.
pub fn carry_companions(sources: &[PathBuf], out: &Path) -> Result<Vec<&'static str>> {
    let mut from_gguf: Vec<(&PathBuf, _)> = Vec::new();
    for source in sources.iter().filter(|s| is_gguf(s)) {
        if !from_gguf.iter().any(|(known, _)| *known == source) {
            from_gguf.push((source, gguf_identity(source)?));
        }
    }
    let mut carried = Vec::new();
    for &name in COMPANION_FILES {
        for source in sources {
            let written = from_gguf
                .iter()
                .filter(|(path, _)| *path == source)
                .flat_map(|(_, files)| files)
                .find(|(file, _)| *file == name);
            if let Some((_, bytes)) = written {
                write_atomically(&out.join(name), bytes)?;
            } else if source.join(name).is_file() {
                copy_companion(source, name, out)?;
            } else {
                continue;
            }
            carried.push(name);
            break;
        }
    }
    Ok(carried)
}
