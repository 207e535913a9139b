//! `[data]`: where samples come from.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Problems;

/// Where samples come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataConfig {
    /// `addition`, `text`, `idx` or `csv`.
    pub kind: DataKind,
    /// Addition: the most digits of an operand.
    pub digits: u32,
    /// Addition: training problems per epoch.
    pub train_size: usize,
    /// Held-out samples for the metric.
    pub eval_size: usize,
    /// Text or CSV: the file; token shards: the prepared directory.
    pub path: Option<PathBuf>,
    /// IDX: the training images and labels, and optionally the test ones.
    pub images: Option<PathBuf>,
    /// IDX: training labels.
    pub labels: Option<PathBuf>,
    /// IDX: test images (otherwise the last `eval_size` training images are held out).
    pub test_images: Option<PathBuf>,
    /// IDX: test labels.
    pub test_labels: Option<PathBuf>,
    /// CSV: whether the first row is a header. Unset, it is one only when none of its cells is
    /// a number, and a first row with some cells numeric and some not is an error.
    pub header: Option<bool>,
    /// Text and token shards: tokens per sample, unless the model sets its context.
    pub context: usize,
    /// Batches prepared ahead by the loader's thread.
    pub prefetch: usize,
    /// Chat token shards: pack whole conversations several to a training window (each
    /// window's samples say where each begins), or, false, one conversation a window, padded.
    pub packing: bool,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            kind: DataKind::Addition,
            digits: 4,
            train_size: 200_000,
            eval_size: 1000,
            path: None,
            images: None,
            labels: None,
            test_images: None,
            test_labels: None,
            header: None,
            context: 64,
            prefetch: 4,
            packing: true,
        }
    }
}

/// The built-in datasets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataKind {
    /// `123+4567=` with the reversed sum as target (GPT).
    Addition,
    /// A character-level text file (GPT).
    Text,
    /// IDX files, the MNIST format (MLP).
    Idx,
    /// A CSV file of features with the class in the last column (MLP).
    Csv,
    /// Token shards written by `headroom prepare` (`data.path`, the directory), in windows
    /// of the model's context (GPT); conversations from `headroom prepare --chat`, packed or
    /// one a window (`data.packing`), scored where the shards say.
    TokenShards,
    /// Uniform random tokens of the model's vocabulary, seeded, in windows of its context
    /// (GPT): any shape can be planned and measured without a corpus.
    UniformTokens,
}

impl DataKind {
    /// Its name, as configurations and flags write it.
    pub fn name(self) -> &'static str {
        match self {
            DataKind::Addition => "addition",
            DataKind::Text => "text",
            DataKind::Idx => "idx",
            DataKind::Csv => "csv",
            DataKind::TokenShards => "token-shards",
            DataKind::UniformTokens => "uniform-tokens",
        }
    }
}

impl DataConfig {
    /// The problems of the data's own settings.
    pub(super) fn check(&self, problems: &mut Problems) {
        match self.kind {
            DataKind::Addition => problems.check(
                (1..=9).contains(&self.digits) && self.train_size > 0,
                format!(
                    "data: addition needs 1 to 9 digits and some training problems, got {} digits and {}",
                    self.digits, self.train_size
                ),
            ),
            DataKind::Text => {
                problems.check(self.path.is_some(), "data.path: the text file to read".into())
            }
            DataKind::TokenShards => {
                problems.check(
                    self.path.is_some(),
                    "data.path: the directory `headroom prepare` wrote".into(),
                );
                problems.check(
                    self.eval_size > 0,
                    "data.eval_size: 0 held-out windows to judge the model on".into(),
                );
            }
            DataKind::UniformTokens => problems.check(
                self.train_size > 0,
                "data.train_size: 0 windows of uniform tokens".into(),
            ),
            DataKind::Csv => {
                problems.check(self.path.is_some(), "data.path: the CSV file to read".into())
            }
            DataKind::Idx => problems.check(
                self.images.is_some() && self.labels.is_some(),
                "data.images and data.labels: the IDX files to read".into(),
            ),
        }
        problems.check(
            self.prefetch > 0,
            "data.prefetch: at least one batch ahead".into(),
        );
    }
}
