//! One rank's file of a sharded checkpoint, read and checked only when first needed: a rank
//! resuming reads the files that hold its chunks, not every rank's.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use headroom_kernels::Device;

use super::{Checkpoint, load};
use crate::error::Result;

/// A rank file, named by the index, and its contents once read.
#[derive(Debug)]
pub(super) struct RankFile {
    path: PathBuf,
    device: Device,
    /// Invariant: the file at `path`, read and checked ([`load`]), once anything asked for it.
    read: OnceLock<Checkpoint>,
}

impl RankFile {
    /// The file at `path`, not read yet, for restoring onto `device`.
    pub(super) fn new(path: &Path, device: &Device) -> Self {
        Self {
            path: path.to_owned(),
            device: device.clone(),
            read: OnceLock::new(),
        }
    }

    /// Its contents: read and checked (every checksum) the first time.
    pub(super) fn get(&self) -> Result<&Checkpoint> {
        if let Some(read) = self.read.get() {
            return Ok(read);
        }
        let read = load(&self.path, &self.device)?;
        Ok(self.read.get_or_init(|| read))
    }
}
