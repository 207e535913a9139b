//! Where `headroom prepare` writes before it has succeeded: the `.unfinished` directory inside
//! the output directory. Its shards move into place only once the whole preparation is known
//! to succeed; a failed run removes it, leaving the output directory as it was, and a run that
//! was stopped leaves it for the next to keep what it finished.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The staging directory's name inside the output directory.
pub const UNFINISHED: &str = ".unfinished";

/// The staging directory of one preparation.
#[derive(Debug)]
pub(super) struct Staging {
    out: PathBuf,
    dir: PathBuf,
    /// The output directory did not exist before this preparation.
    made_out: bool,
}

impl Staging {
    /// Makes (or reopens) the staging directory of `out`.
    pub fn open(out: &Path) -> Result<Self> {
        let made_out = !out.exists();
        let dir = out.join(UNFINISHED);
        std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
        Ok(Self {
            out: out.to_owned(),
            dir,
            made_out,
        })
    }

    /// The output directory.
    pub fn out(&self) -> &Path {
        &self.out
    }

    /// The staging directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Moves the staged `file` into the output directory, over an older one of its name.
    pub fn place(&self, file: &str) -> Result<()> {
        let from = self.dir.join(file);
        std::fs::rename(&from, self.out.join(file)).map_err(Error::io(&from))
    }

    /// Removes the staging directory once its shards are in place.
    pub fn finish(&self) -> Result<()> {
        std::fs::remove_dir_all(&self.dir).map_err(Error::io(&self.dir))
    }

    /// Gives the preparation up: removes the staging directory, and the output directory when
    /// this preparation made it, so that nothing is left changed. Failing to remove them
    /// loses nothing, and the preparation's own error is the one to report.
    pub fn discard(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if self.made_out {
            let _ = std::fs::remove_dir(&self.out);
        }
    }
}
