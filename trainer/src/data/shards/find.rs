//! The text files of the inputs of `headroom prepare` and `headroom tokenizer train`:
//! directories walked in name order, symbolic links followed (to files and to directories, as
//! in the Hugging Face cache), each directory and each file taken once however many links lead
//! to it (so a link back up ends no loop), and a directory or a link that cannot be read
//! reported and skipped.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::manifest::Skipped;
use crate::error::{Error, Result};

/// Which files of the input directories are read.
#[derive(Debug, Clone, Default)]
pub struct FileFilter {
    /// Only files with one of these extensions (without the dot); empty: every file.
    pub extensions: Vec<String>,
    /// Directories of these names are not walked (such as `site-packages` or `test`).
    pub skip_dirs: Vec<String>,
}

impl FileFilter {
    fn wants_file(&self, path: &Path) -> bool {
        self.extensions.is_empty()
            || path.extension().is_some_and(|e| {
                self.extensions
                    .iter()
                    .any(|w| e == w.trim_start_matches('.'))
            })
    }

    fn wants_dir(&self, path: &Path) -> bool {
        path.file_name()
            .is_none_or(|name| !self.skip_dirs.iter().any(|skip| name == skip.as_str()))
    }
}

/// A file found.
#[derive(Debug, Clone)]
pub(super) struct FoundFile {
    /// Its path, as reached (through links).
    pub path: PathBuf,
    /// Its path under the input that holds it (its file name for a file given as an input).
    pub name: String,
    /// Its size.
    pub bytes: u64,
}

/// A walk over inputs, remembering what it took so that nothing is taken twice.
#[derive(Debug, Default)]
pub(super) struct Walk {
    /// The canonical paths of the directories walked or left out.
    dirs: HashSet<PathBuf>,
    /// The canonical paths of the files taken.
    files: HashSet<PathBuf>,
    /// What could not be read.
    pub skipped: Vec<Skipped>,
}

impl Walk {
    /// A walk that never enters `dir` (the output directory, when it lies among the inputs).
    pub fn leaving_out(dir: Option<&Path>) -> Self {
        let mut walk = Self::default();
        walk.dirs
            .extend(dir.and_then(|d| std::fs::canonicalize(d).ok()));
        walk
    }

    /// The files of `inputs` that `filter` wants and this walk has not taken yet, each input's
    /// in path order. An input that does not exist is an error; what cannot be read inside one
    /// is skipped and recorded. `what` names the inputs in errors ("" or "held-out ").
    pub fn files(
        &mut self,
        inputs: &[PathBuf],
        filter: &FileFilter,
        what: &str,
    ) -> Result<Vec<FoundFile>> {
        if inputs.is_empty() {
            return Err(Error::config(format!(
                "no {}files or directories given",
                if what.is_empty() { "input " } else { what }
            )));
        }
        let mut found = Vec::new();
        for input in inputs {
            let meta = std::fs::metadata(input).map_err(Error::io(input))?;
            if meta.is_file() {
                let name = input.file_name().unwrap_or_default().to_string_lossy();
                if self.take_file(input) {
                    found.push(FoundFile {
                        path: input.clone(),
                        name: name.into_owned(),
                        bytes: meta.len(),
                    });
                }
                continue;
            }
            let mut paths = self.walk_dir(input, filter);
            paths.sort_by(|a, b| a.0.cmp(&b.0));
            for (path, bytes) in paths {
                if self.take_file(&path) {
                    let name = path.strip_prefix(input).unwrap_or(&path);
                    found.push(FoundFile {
                        name: name.to_string_lossy().into_owned(),
                        path,
                        bytes,
                    });
                }
            }
        }
        if found.is_empty() {
            let only = match filter.extensions.as_slice() {
                [] => String::new(),
                some => format!(" ending in .{}", some.join(", .")),
            };
            return Err(Error::config(format!(
                "no {what}files{only} in {}",
                inputs
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(found)
    }

    /// True the first time the file at `path` is met (by its canonical path).
    fn take_file(&mut self, path: &Path) -> bool {
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        self.files.insert(canonical)
    }

    /// The wanted files under `root` with their sizes, depth first in name order.
    fn walk_dir(&mut self, root: &Path, filter: &FileFilter) -> Vec<(PathBuf, u64)> {
        let mut found = Vec::new();
        let mut stack = vec![root.to_owned()];
        while let Some(dir) = stack.pop() {
            let canonical = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
            if !self.dirs.insert(canonical) {
                continue;
            }
            let entries = match list(&dir) {
                Ok(entries) => entries,
                Err(err) => {
                    self.skip(&dir, format!("cannot read the directory: {err}"));
                    continue;
                }
            };
            let mut subdirs = Vec::new();
            for path in entries {
                // Follows a link to what it names.
                let meta = match std::fs::metadata(&path) {
                    Ok(meta) => meta,
                    Err(err) => {
                        self.skip(&path, format!("cannot read it: {err}"));
                        continue;
                    }
                };
                if meta.is_dir() && filter.wants_dir(&path) {
                    subdirs.push(path);
                } else if meta.is_file() && filter.wants_file(&path) {
                    found.push((path, meta.len()));
                }
            }
            stack.extend(subdirs.into_iter().rev());
        }
        found
    }

    fn skip(&mut self, path: &Path, reason: String) {
        tracing::warn!("skipped {}: {reason}", path.display());
        self.skipped.push(Skipped {
            path: path.to_owned(),
            reason,
        });
    }
}

/// The entries of `dir`, in name order.
fn list(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut paths = std::fs::read_dir(dir)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<Vec<_>>>()?;
    paths.sort();
    Ok(paths)
}

/// Every file of `inputs` (directories walked in name order, links followed) that `filter`
/// wants; what cannot be read is reported (a warning) and skipped.
pub fn find_files(inputs: &[PathBuf], filter: &FileFilter) -> Result<Vec<PathBuf>> {
    Ok(Walk::default()
        .files(inputs, filter, "")?
        .into_iter()
        .map(|f| f.path)
        .collect())
}
