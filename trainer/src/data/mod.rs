//! Datasets, batches and the loader: a seeded shuffle per epoch, batching, and a background
//! thread that prepares a bounded number of batches ahead.

mod addition;
mod csv;
mod device_batch;
mod idx;
mod loader;
mod text;
mod token_shards;
mod uniform;

use std::path::Path;
use std::sync::Arc;

use headroom_autograd::Tensor;
use headroom_kernels::Device;

use crate::config::{DataConfig, DataKind, ModelConfig};
use crate::error::{Error, Result};

pub use addition::Addition;
pub use csv::read_csv;
pub use device_batch::{DeviceBatch, INPUTS, TARGETS};
pub use idx::read_idx;
pub use loader::{Loader, Position};
pub use text::CharText;
pub use token_shards::TokenShards;
pub use uniform::UniformTokens;

/// The target value of positions that are not scored (prompt tokens, padding).
pub const IGNORE: u32 = u32::MAX;

/// What a dataset's samples look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataShape {
    /// Sequences of `len` tokens below `vocab`, a target per position.
    Tokens {
        /// Distinct tokens.
        vocab: usize,
        /// Tokens per sample.
        len: usize,
    },
    /// Vectors of `dim` features, one class below `classes` per sample.
    Features {
        /// Features per sample.
        dim: usize,
        /// Distinct classes.
        classes: usize,
    },
}

/// One sample as the host holds it.
#[derive(Debug, Clone, PartialEq)]
pub enum Sample {
    /// Token ids and a target per position ([`IGNORE`] where not scored).
    Tokens {
        /// The input tokens.
        ids: Vec<u32>,
        /// The next token at each position.
        targets: Vec<u32>,
    },
    /// Features and a class.
    Features {
        /// The features.
        values: Vec<f32>,
        /// The class.
        class: u32,
    },
}

/// A collection of samples, addressed by index.
pub trait Dataset: Send + Sync {
    /// Number of samples.
    fn len(&self) -> usize;

    /// True without samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the samples look like.
    fn shape(&self) -> DataShape;

    /// Sample `index` (below `len`).
    fn sample(&self, index: usize) -> Sample;
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

/// Training samples, held-out samples, and how to judge the latter.
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
    /// The task a configuration describes, its files read and checked; token windows take
    /// their length (and uniform tokens their vocabulary) from the `model`.
    pub fn from_config(config: &DataConfig, model: &ModelConfig, seed: u64) -> Result<Self> {
        let need = |path: &Option<std::path::PathBuf>, what: &str| -> Result<std::path::PathBuf> {
            path.clone()
                .ok_or_else(|| Error::config(format!("data.{what}: no file given")))
        };
        match config.kind {
            DataKind::Addition => {
                let train = Addition::new(config.digits, config.train_size, seed, false);
                let eval = Addition::new(config.digits, config.eval_size, seed, true);
                Ok(Self {
                    train: Arc::new(train),
                    eval: Arc::new(eval),
                    metric: Metric::ExactMatch,
                })
            }
            DataKind::Text => {
                let path = need(&config.path, "path")?;
                let (train, eval) = CharText::read(&path, model.window(config.context))?;
                Ok(Self {
                    train: Arc::new(train),
                    eval: Arc::new(eval),
                    metric: Metric::Loss,
                })
            }
            DataKind::TokenShards => {
                let dir = need(&config.path, "path")?;
                let window = model.window(config.context);
                let (train, eval) = TokenShards::open(&dir, window, config.eval_size)?;
                Ok(Self {
                    train: Arc::new(train),
                    eval: Arc::new(eval),
                    metric: Metric::Loss,
                })
            }
            DataKind::UniformTokens => {
                let vocab = model.own_vocab().ok_or_else(|| {
                    Error::config(
                        "data.kind: uniform tokens are drawn from the model's vocabulary: set \
                         model.vocab or model.preset",
                    )
                })?;
                let window = model.window(config.context);
                let draw =
                    |count, held_out| UniformTokens::new(vocab, window, count, seed, held_out);
                Ok(Self {
                    train: Arc::new(draw(config.train_size, false)),
                    eval: Arc::new(draw(config.eval_size, true)),
                    metric: Metric::Loss,
                })
            }
            DataKind::Csv => {
                let path = need(&config.path, "path")?;
                let all = read_csv(&path, config.header)?;
                Self::features(all, None, config.eval_size, &path)
            }
            DataKind::Idx => {
                let images = need(&config.images, "images")?;
                let labels = need(&config.labels, "labels")?;
                let train = read_idx(&images, &labels)?;
                let test = match (&config.test_images, &config.test_labels) {
                    (Some(i), Some(l)) => Some((read_idx(i, l)?, i.clone())),
                    (None, None) => None,
                    _ => {
                        return Err(Error::config(
                            "data.test_images and data.test_labels: give both or neither",
                        ));
                    }
                };
                Self::features(train, test, config.eval_size, &images)
            }
        }
    }

    /// A classification task from feature tables read from `path` (and a test table with its
    /// own file); without a test table, the last `held_out` rows of the training one are held
    /// out.
    fn features(
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
        DataShape::Features {
            dim: self.dim,
            classes: self.classes,
        }
    }

    fn sample(&self, index: usize) -> Sample {
        Sample::Features {
            values: self.values[index * self.dim..(index + 1) * self.dim].to_vec(),
            class: self.labels[index],
        }
    }
}

/// Samples gathered for one step, on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostBatch {
    /// The dataset index of each sample, in order.
    pub indices: Vec<usize>,
    /// The inputs, concatenated.
    pub inputs: HostInputs,
    /// The targets, `targets_per_sample` per sample.
    pub targets: Vec<u32>,
    /// Targets per sample.
    pub targets_per_sample: usize,
}

/// Inputs of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum HostInputs {
    /// `len` tokens per sample.
    Tokens {
        /// The ids.
        ids: Vec<u32>,
        /// Tokens per sample.
        len: usize,
    },
    /// `dim` features per sample.
    Features {
        /// The features.
        values: Vec<f32>,
        /// Features per sample.
        dim: usize,
    },
}

impl HostBatch {
    /// The samples `indices` of `dataset`, collated.
    pub fn collect(dataset: &dyn Dataset, indices: &[usize]) -> Self {
        let (mut ids, mut values, mut targets) = (Vec::new(), Vec::new(), Vec::new());
        let mut per_sample = 0;
        for &i in indices {
            match dataset.sample(i) {
                Sample::Tokens { ids: s, targets: t } => {
                    per_sample = t.len();
                    ids.extend(s);
                    targets.extend(t);
                }
                Sample::Features { values: v, class } => {
                    per_sample = 1;
                    values.extend(v);
                    targets.push(class);
                }
            }
        }
        let inputs = match dataset.shape() {
            DataShape::Tokens { len, .. } => HostInputs::Tokens { ids, len },
            DataShape::Features { dim, .. } => HostInputs::Features { values, dim },
        };
        Self {
            indices: indices.to_vec(),
            inputs,
            targets,
            targets_per_sample: per_sample,
        }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// True without samples.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// Samples `start..end`, as a batch of their own.
    pub fn slice(&self, start: usize, end: usize) -> Self {
        let inputs = match &self.inputs {
            HostInputs::Tokens { ids, len } => HostInputs::Tokens {
                ids: ids[start * len..end * len].to_vec(),
                len: *len,
            },
            HostInputs::Features { values, dim } => HostInputs::Features {
                values: values[start * dim..end * dim].to_vec(),
                dim: *dim,
            },
        };
        let t = self.targets_per_sample;
        Self {
            indices: self.indices[start..end].to_vec(),
            inputs,
            targets: self.targets[start * t..end * t].to_vec(),
            targets_per_sample: t,
        }
    }

    /// Targets that are scored (not [`IGNORE`]): what a mean loss divides by.
    pub fn scored(&self) -> usize {
        self.targets.iter().filter(|&&t| t != IGNORE).count()
    }

    /// The batch on `device`: its [`INPUTS`] and [`TARGETS`], tagged as data.
    pub fn to_device(&self, device: &Device) -> Result<DeviceBatch> {
        let (inputs, targets) = self.arrays_on(device)?;
        DeviceBatch::new(vec![(INPUTS.into(), inputs), (TARGETS.into(), targets)])
    }

    /// The inputs and targets as tensors on `device`, tagged as data.
    fn arrays_on(&self, device: &Device) -> Result<(Tensor, Tensor)> {
        let _data = device.scoped_tag(headroom_alloc::Tag::DATA);
        let n = self.len();
        let inputs = match &self.inputs {
            HostInputs::Tokens { ids, len } => Tensor::from_host(device, [n, *len], ids)?,
            HostInputs::Features { values, dim } => Tensor::from_host(device, [n, *dim], values)?,
        };
        let targets = match self.inputs {
            HostInputs::Tokens { len, .. } => Tensor::from_host(device, [n, len], &self.targets)?,
            HostInputs::Features { .. } => Tensor::from_host(device, [n], &self.targets)?,
        };
        Ok((inputs, targets))
    }
}
