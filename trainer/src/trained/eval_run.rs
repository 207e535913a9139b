//! `headroom eval`: a trained model judged on held-out data, its own run's or other prepared
//! shards, by the task's metric (for text, the loss and its perplexity).

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::config::{DataKind, ModelKind};
use crate::data::shards::Manifest;
use crate::data::{Metric, Task};
use crate::error::{Error, Result};
use crate::model::TrainModel;
use crate::trained::eval::evaluate;
use crate::trained::saved_run::{SavedRun, UseSettings, model_tokenizer, pretrained_model};

/// What to judge the model on, when not its own run's held-out data.
#[derive(Debug, Clone, Default)]
pub struct EvalData {
    /// A directory of token shards (`headroom prepare`): its held-out shards.
    pub shards: Option<PathBuf>,
    /// Held-out samples at most.
    pub eval_size: Option<usize>,
    /// Tokens per held-out window, at most the model's context (default: the run's context, or
    /// a pretrained model's whole context).
    pub context: Option<usize>,
}

/// A model's held-out score, as `headroom eval` prints and writes it.
#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    /// The run directory.
    pub run_dir: PathBuf,
    /// The data judged on.
    pub data: String,
    /// The metric's name.
    pub metric: String,
    /// Its value (a fraction for exact match and accuracy).
    pub value: f64,
    /// For the loss: its exponential.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub perplexity: Option<f64>,
    /// Chat data: which tokens the loss is over (`assistant`: the assistant's turns, or
    /// `all`), the targets the shards flag as scored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scored: Option<String>,
    /// Held-out samples judged.
    pub samples: usize,
    /// Seconds taken.
    pub seconds: f64,
}

/// Judges the model of `run_dir` on `data`'s held-out samples (or its run's).
pub fn evaluate_run(run_dir: &Path, data: &EvalData, settings: &UseSettings) -> Result<EvalReport> {
    let mut config = SavedRun::config_of_model(run_dir)?;
    if data.shards.is_none() && pretrained_model(run_dir).is_some() {
        return Err(Error::config(format!(
            "{} is a Hugging Face model (or a GGUF file), with no held-out data of its own: give \
             --data (token shards from `headroom prepare`, tokenized by its tokenizer)",
            run_dir.display()
        )));
    }
    if let Some(dir) = &data.shards {
        config.data.kind = DataKind::TokenShards;
        config.data.path = Some(dir.clone());
    }
    if let Some(size) = data.eval_size {
        config.data.eval_size = size;
    }
    if let Some(context) = data.context {
        config.model.context = Some(context);
    }
    let task = Task::held_out_of(&config.data, &config.model, config.seed)?;
    let shape = task.eval.shape();
    let mlp = (config.model.kind == ModelKind::Mlp).then(|| shape.clone());
    let run = SavedRun::open(run_dir, settings, mlp)?;
    if let (TrainModel::Gpt(gpt), Some(tokens)) = (&run.model, shape.as_tokens())
        && tokens.vocab != gpt.config().vocab
    {
        return Err(Error::config(format!(
            "the data has a vocabulary of {} tokens, the model of {}: not the run's \
             tokenizer",
            tokens.vocab,
            gpt.config().vocab
        )));
    }
    if let (TrainModel::Gpt(gpt), Some(tokens)) = (&run.model, shape.as_tokens())
        && tokens.len > gpt.config().context
    {
        return Err(Error::config(format!(
            "held-out windows of {} tokens, where the model reads at most {}: give a --context \
             of at most {}",
            tokens.len,
            gpt.config().context,
            gpt.config().context
        )));
    }
    if let Some(dir) = &data.shards {
        same_tokenizer(run_dir, dir)?;
    }
    let chunk = config.batch.micro.unwrap_or(config.batch.size);
    let started = Instant::now();
    let value = evaluate(
        &run.model,
        &task,
        &run.device,
        config.compute_precision(),
        chunk,
    )?;
    let described = match &config.data.path {
        Some(path) => format!("{} {}", config.data.kind.name(), path.display()),
        None => config.data.kind.name().to_owned(),
    };
    let value = value
        .ok_or_else(|| Error::config(format!("{described} holds no held-out samples to judge")))?;
    let scored = match (config.data.kind, &config.data.path) {
        (DataKind::TokenShards, Some(dir)) => Manifest::read(dir)?.chat.map(|chat| chat.scored),
        _ => None,
    };
    Ok(EvalReport {
        run_dir: run_dir.to_owned(),
        data: described,
        scored,
        metric: task.metric.name().into(),
        value,
        perplexity: (task.metric == Metric::Loss).then(|| value.exp()),
        samples: task.eval.len(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Refuses the token shards in `shards` when the run `run_dir` kept a tokenizer other than the
/// one they were tokenized with.
fn same_tokenizer(run_dir: &Path, shards: &Path) -> Result<()> {
    let manifest = Manifest::read(shards)?;
    match manifest.tokenizer_mismatch(&model_tokenizer(run_dir), "the run's") {
        None => Ok(()),
        Some(detail) => Err(Error::Data {
            path: shards.to_owned(),
            detail,
        }),
    }
}

impl std::fmt::Display for EvalReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let over = match self.scored.as_deref() {
            Some("all") => " on scored tokens (all)",
            Some(_) => " on scored tokens (the assistant's)",
            None => "",
        };
        match self.perplexity {
            Some(perplexity) => write!(
                f,
                "held-out loss{over} {:.4}, perplexity {perplexity:.2}",
                self.value
            )?,
            None => write!(f, "held-out {} {:.2}%", self.metric, self.value * 100.0)?,
        }
        write!(
            f,
            " over {} samples of {} ({:.1} s)",
            self.samples, self.data, self.seconds
        )
    }
}
