//! The files and directories a run's settings name: made absolute when a run starts, so that the
//! configuration it saves works from any directory, and each one the run reads checked, a
//! missing one named by its setting.

use std::path::{Path, PathBuf};

use super::{DataConfig, DataKind, ModelConfig, ModelKind, TrainConfig};
use crate::error::{Error, Result};

/// What a path setting names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Names {
    File,
    Directory,
}

impl TrainConfig {
    /// Makes every path setting absolute (but the run directory's): each existing one with its
    /// links resolved, a Hugging Face cache entry in `model.init_from` as the snapshot it holds
    /// now (a LoRA run's adapters belong to the base weights they were trained on, and
    /// `refs/main` moves when a newer revision is fetched), and a missing one from the current
    /// directory. Relative paths are read from the current directory, as they were written.
    pub fn resolve_paths(&mut self) {
        if let Some(dir) = &mut self.model.init_from {
            if let Ok(snapshot) = headroom_nn::hf::model_dir(dir) {
                *dir = snapshot;
            }
            *dir = resolved(dir);
        }
        let data = &mut self.data;
        for path in [
            &mut data.path,
            &mut data.images,
            &mut data.labels,
            &mut data.test_images,
            &mut data.test_labels,
        ]
        .into_iter()
        .flatten()
        {
            *path = resolved(path);
        }
    }

    /// Every path the run reads that is not there, as a problem naming its setting.
    pub fn missing_paths(&self) -> Vec<String> {
        self.model
            .missing_init_from()
            .into_iter()
            .chain(self.data.missing_paths())
            .collect()
    }
}

impl ModelConfig {
    /// `init_from`, when it names neither a directory (or GGUF file) that is there nor a Hub id
    /// in the local cache, as a problem naming it.
    pub fn missing_init_from(&self) -> Option<String> {
        let dir = self.init_from.as_ref()?;
        // A Hub id names no directory until the local cache's entry stands for it.
        let used = self.kind == ModelKind::Gpt && headroom_nn::hf::cached_model(dir).is_none();
        // A GGUF model is one file where a Hugging Face model is a directory.
        let names = match dir
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        {
            true => Names::File,
            false => Names::Directory,
        };
        used.then(|| missing("model.init_from", dir, names))
            .flatten()
    }

    /// [`missing_init_from`](Self::missing_init_from) as an error.
    pub fn check_init_from(&self) -> Result<()> {
        self.missing_init_from()
            .map_or(Ok(()), |p| Err(Error::config(p)))
    }
}

impl DataConfig {
    /// Every file or directory the data's kind reads that is not there, each a problem naming
    /// its setting.
    pub fn missing_paths(&self) -> Vec<String> {
        let settings: Vec<(&str, &Option<PathBuf>, Names)> = match self.kind {
            DataKind::Text | DataKind::Csv => vec![("data.path", &self.path, Names::File)],
            DataKind::TokenShards => vec![("data.path", &self.path, Names::Directory)],
            DataKind::Idx => vec![
                ("data.images", &self.images, Names::File),
                ("data.labels", &self.labels, Names::File),
                ("data.test_images", &self.test_images, Names::File),
                ("data.test_labels", &self.test_labels, Names::File),
            ],
            DataKind::Addition | DataKind::UniformTokens => Vec::new(),
        };
        settings
            .into_iter()
            .filter_map(|(name, path, names)| missing(name, path.as_deref()?, names))
            .collect()
    }

    /// [`missing_paths`](Self::missing_paths) as an error listing them.
    pub fn check_paths(&self) -> Result<()> {
        match self.missing_paths() {
            problems if problems.is_empty() => Ok(()),
            problems => Err(Error::Config { problems }),
        }
    }
}

/// The problem of the setting `name` naming `path`, when nothing is there.
fn missing(name: &str, path: &Path, names: Names) -> Option<String> {
    if std::fs::metadata(path).is_ok() {
        return None;
    }
    let what = match names {
        Names::File => "file",
        Names::Directory => "directory",
    };
    Some(format!(
        "{name} = {:?}: no such {what}",
        path.display().to_string()
    ))
}

/// `path` absolute: its links and `..` resolved where it exists, or else joined to the current
/// directory.
fn resolved(path: &Path) -> PathBuf {
    std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_become_absolute_and_missing_ones_are_named_by_their_setting() {
        let mut config = TrainConfig::default();
        config.model.init_from = Some("no-such-model".into());
        config.data.kind = DataKind::TokenShards;
        config.data.path = Some("no-such-shards".into());
        config.resolve_paths();
        let cwd = std::env::current_dir().unwrap();
        let init_from = cwd.join("no-such-model");
        assert_eq!(config.model.init_from.as_deref(), Some(init_from.as_path()));
        assert_eq!(config.data.path, Some(cwd.join("no-such-shards")));
        assert_eq!(
            config.missing_paths(),
            [
                format!(
                    "model.init_from = {:?}: no such directory",
                    init_from.display().to_string()
                ),
                format!(
                    "data.path = {:?}: no such directory",
                    cwd.join("no-such-shards").display().to_string()
                ),
            ]
        );
        // A path the data's kind does not read is not asked for.
        config.data.kind = DataKind::Addition;
        assert_eq!(config.missing_paths().len(), 1);
        config.model.init_from = Some(cwd.join("src/../src"));
        config.resolve_paths();
        assert_eq!(config.model.init_from, Some(cwd.join("src")));
        assert!(config.missing_paths().is_empty());
    }
}
