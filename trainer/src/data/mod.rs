//! Data and text: datasets, batches and the loader (a seeded shuffle per epoch, batching, and a
//! background thread that prepares a bounded number of batches ahead); text tokenized
//! ([`tokenizer`]) once into token shards ([`shards`]) that runs read memory-mapped.
//!
//! A dataset's samples are named arrays of any dtype and shape ([`DataShape`]): ids, features,
//! labels, masks. The built-in kinds are two instances: token sequences and feature vectors,
//! each as [`INPUTS`] and [`TARGETS`]; conversations ([`chat`]) packed several to a window add
//! [`STARTS`], where each begins.

mod addition;
pub mod chat;
mod csv;
mod device_batch;
mod gguf_pre;
pub mod gguf_tokenizer;
mod host_batch;
mod idx;
mod loader;
mod sample;
mod shape;
pub mod shards;
mod text;
mod token_shards;
pub mod tokenizer;
mod uniform;
mod values;

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};

pub use addition::Addition;
pub use chat::ChatShards;
pub use csv::read_csv;
pub use device_batch::{DeviceBatch, INPUTS, STARTS, TARGETS};
pub use host_batch::HostBatch;
pub use idx::read_idx;
pub use loader::{Loader, Position};
pub use sample::Sample;
pub use shape::{DataShape, FeatureShape, Field, TokenShape};
pub use text::CharText;
pub use token_shards::TokenShards;
pub use uniform::UniformTokens;
pub use values::Values;

/// The target value of positions that are not scored (prompt tokens, padding).
pub const IGNORE: u32 = u32::MAX;

/// A collection of samples, addressed by index.
pub trait Dataset: Send + Sync {
    /// Number of samples.
    fn len(&self) -> usize;

    /// True without samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What every sample holds.
    fn shape(&self) -> DataShape;

    /// Sample `index` (below `len`): its arrays in the order of [`shape`](Self::shape).
    fn sample(&self, index: usize) -> Result<Sample>;

    /// A character-level dataset's vocabulary, token `i` being the `i`-th character (what a
    /// run keeps as its tokenizer); none for other data.
    fn characters(&self) -> Option<&[char]> {
        None
    }
}

/// How a task's held-out samples are judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// The fraction of samples whose every scored token the model generates right, greedily.
    ExactMatch,
    /// The mean cross-entropy on the scored tokens.
    Loss,
    /// The fraction of samples classified right.
    Accuracy,
}

impl Metric {
    /// Its name, for tables.
    pub fn name(self) -> &'static str {
        match self {
            Metric::ExactMatch => "exact match",
            Metric::Loss => "loss",
            Metric::Accuracy => "accuracy",
        }
    }
}

/// Training samples, held-out samples, and how to judge the latter. A configuration's task is
/// [`Task::from_config`] (built in `config/task.rs`, above this folder).
#[derive(Clone)]
pub struct Task {
    /// What the model trains on.
    pub train: Arc<dyn Dataset>,
    /// What it is judged on (never trained on).
    pub eval: Arc<dyn Dataset>,
    /// How.
    pub metric: Metric,
}

impl Task {
    /// A classification task from feature tables read from `path` (and a test table with its
    /// own file); without a test table, the last `held_out` rows of the training one are held
    /// out.
    pub(crate) fn features(
        train: FeatureTable,
        test: Option<(FeatureTable, std::path::PathBuf)>,
        held_out: usize,
        path: &Path,
    ) -> Result<Self> {
        let (train, eval) = match test {
            Some((test, test_path)) => {
                if test.dim != train.dim {
                    return Err(Error::Data {
                        path: test_path,
                        detail: format!(
                            "its samples have {} features, those of the training set ({}) {}",
                            test.dim,
                            path.display(),
                            train.dim
                        ),
                    });
                }
                (train, test)
            }
            None => train.split_off(held_out, path)?,
        };
        let classes = train.classes.max(eval.classes);
        Ok(Self {
            train: Arc::new(FeatureTable { classes, ..train }),
            eval: Arc::new(FeatureTable { classes, ..eval }),
            metric: Metric::Accuracy,
        })
    }
}

/// Feature vectors and their classes, in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureTable {
    /// Features per sample.
    pub dim: usize,
    /// One more than the largest class.
    pub classes: usize,
    /// `len * dim` features.
    pub values: Vec<f32>,
    /// One class per sample.
    pub labels: Vec<u32>,
}

impl FeatureTable {
    /// The last `held_out` samples as a second table.
    fn split_off(mut self, held_out: usize, path: &Path) -> Result<(Self, Self)> {
        let n = self.labels.len();
        if held_out >= n {
            return Err(Error::Data {
                path: path.to_owned(),
                detail: format!(
                    "{n} samples cannot spare {held_out} for evaluation and keep some for training"
                ),
            });
        }
        let keep = n - held_out;
        let eval = FeatureTable {
            dim: self.dim,
            classes: self.classes,
            values: self.values.split_off(keep * self.dim),
            labels: self.labels.split_off(keep),
        };
        Ok((self, eval))
    }
}

impl Dataset for FeatureTable {
    fn len(&self) -> usize {
        self.labels.len()
    }

    fn shape(&self) -> DataShape {
        DataShape::features(self.dim, self.classes)
    }

    fn sample(&self, index: usize) -> Result<Sample> {
        let values = self.values[index * self.dim..(index + 1) * self.dim].to_vec();
        Ok(Sample::features(values, self.labels[index]))
    }
}
