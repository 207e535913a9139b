//! Files replaced whole: written beside their place under a temporary name, then renamed over
//! it, so that a process killed meanwhile leaves the old file or the new one, never half of
//! one. The next start removes what a killed process left (see `run_dir`).

use std::path::Path;

use crate::error::{Error, Result};

/// The suffix of [`write_atomically`]'s temporary files.
pub const TEMPORARY: &str = ".tmp";

/// Writes `bytes` to `path` through `path` + [`TEMPORARY`] and a rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(TEMPORARY);
    let temporary = path.with_file_name(name);
    std::fs::write(&temporary, bytes)
        .and_then(|()| std::fs::rename(&temporary, path))
        .map_err(|err| {
            std::fs::remove_file(&temporary).ok();
            Error::io(path)(err)
        })
}
