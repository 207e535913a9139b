//! The task a configuration describes: the datasets of its data section (with the model's
//! window and vocabulary), read and checked by the data folder's readers.

use std::sync::Arc;

use super::{DataConfig, DataKind, ModelConfig};
use crate::data::chat::Packing;
use crate::data::{
    Addition, CharText, ChatShards, Dataset, Metric, Task, TokenShards, UniformTokens, read_csv,
    read_idx,
};
use crate::error::{Error, Result};

impl Task {
    /// The task a configuration describes for judging a model: of token shards only the
    /// held-out shards are opened and checked (the training set is the held-out one, for its
    /// shape), as a model judged on prepared data reads nothing else; any other kind is built
    /// whole, as [`Task::from_config`] builds it.
    pub fn held_out_of(config: &DataConfig, model: &ModelConfig, seed: u64) -> Result<Self> {
        config.check_paths()?;
        if config.kind != DataKind::TokenShards {
            return Self::from_config(config, model, seed);
        }
        let dir = config
            .path
            .clone()
            .ok_or_else(|| Error::config("data.path: no file given"))?;
        let window = model.window(config.context);
        let eval: Arc<dyn Dataset> = match ChatShards::is_chat(&dir) {
            true => Arc::new(ChatShards::open_held_out(&dir, window, config.eval_size)?),
            false => Arc::new(TokenShards::open_held_out(&dir, window, config.eval_size)?),
        };
        Ok(Self {
            train: eval.clone(),
            eval,
            metric: Metric::Loss,
        })
    }

    /// The task a configuration describes, its files read and checked; token windows take
    /// their length (and uniform tokens their vocabulary) from the `model`.
    pub fn from_config(config: &DataConfig, model: &ModelConfig, seed: u64) -> Result<Self> {
        config.check_paths()?;
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
                if ChatShards::is_chat(&dir) {
                    let packing = match config.packing {
                        true => Packing::Packed,
                        false => Packing::OneEach,
                    };
                    let (train, eval) = ChatShards::open(&dir, window, config.eval_size, packing)?;
                    return Ok(Self {
                        train: Arc::new(train),
                        eval: Arc::new(eval),
                        metric: Metric::Loss,
                    });
                }
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
}
