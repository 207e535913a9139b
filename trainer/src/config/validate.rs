//! Checks a configuration before anything is built, listing every problem: each section checks
//! its own settings beside its fields; this module checks the run's own settings and how the
//! sections fit together.

use super::{DataKind, ModelKind, PrecisionKind, ShardLevel, TrainConfig};
use crate::error::{Error, Result};

/// The problems found so far, each a sentence that names its setting.
#[derive(Debug, Default)]
pub(super) struct Problems(Vec<String>);

impl Problems {
    /// Records `problem` unless `ok`.
    pub(super) fn check(&mut self, ok: bool, problem: String) {
        if !ok {
            self.0.push(problem);
        }
    }

    /// Records `problem`.
    pub(super) fn add(&mut self, problem: String) {
        self.0.push(problem);
    }
}

impl TrainConfig {
    /// Checks every setting and how they fit together.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Problems(self.missing_paths());
        self.check_run(&mut problems);
        self.model.check(&mut problems);
        self.check_param_dtype(&mut problems);
        self.check_model_reads_the_data(&mut problems);
        self.data.check(&mut problems);
        self.check_data_fits_the_model(&mut problems);
        self.batch.check(&mut problems);
        self.optimizer.check(&mut problems);
        problems.check(
            self.optimizer.in_backward != Some(true) || self.precision.dtype != PrecisionKind::F16,
            "optimizer.in_backward: f16 loss scaling checks every gradient for overflow \
             before the first update; use precision bf16 or f32"
                .into(),
        );
        if let Some(level) = self.distributed.shard {
            let pinned = ShardLevel::of(&self.optimizer);
            problems.check(
                pinned == Some(level),
                format!(
                    "distributed.shard = \"{}\", where the optimizer's settings shard {}",
                    level.name(),
                    pinned.map_or("nothing", ShardLevel::name)
                ),
            );
        }
        problems.check(
            !(self.optimizer.shards_params() && self.model.offloads_weights()),
            "optimizer.shard_params: weights streamed from the host tier \
             (model.offload_weights) are not sharded over ranks yet; turn one of them off"
                .into(),
        );
        problems.check(
            !self.model.offloads_weights() || self.optimizer.offloads(),
            "model.offload_weights: streamed weights are updated where they live, on the host: \
             set optimizer.offload = true too"
                .into(),
        );
        problems.check(
            !self.model.offloads_weights()
                || self
                    .optimizer
                    .launched_as
                    .is_none_or(|(_, ranks)| ranks <= 1),
            "model.offload_weights: a data-parallel run sums its gradients on the devices, and \
             streamed weights' gradients are on the host; train on one rank, or keep the \
             weights on the device"
                .into(),
        );
        self.precision.check(&mut problems);
        if let Err(Error::Config { problems: memory }) = self.memory.budget(self.default_limit()) {
            problems.0.extend(memory);
        }
        match problems.0.is_empty() {
            true => Ok(()),
            false => Err(Error::Config {
                problems: problems.0,
            }),
        }
    }

    /// The device, and how long the run is.
    fn check_run(&self, problems: &mut Problems) {
        match self.device.parse::<super::DeviceChoice>() {
            Err(problem) => problems.add(problem),
            Ok(device) => problems.check(
                !self.memory.expandable_segments || device != super::DeviceChoice::Cpu,
                "memory.expandable_segments: the CPU's memory cannot grow a region in place; \
                 it needs device = \"cuda\""
                    .into(),
            ),
        }
        match (self.steps, self.epochs) {
            (Some(_), Some(_)) => problems.add("give `steps` or `epochs`, not both".into()),
            (Some(0), _) => problems.add(
                "steps: 0 steps trains nothing; to judge or try a model as it is, use `headroom \
                 eval --checkpoint DIR --data SHARDS` or `headroom generate --checkpoint DIR` \
                 (a run directory or a Hugging Face model)"
                    .into(),
            ),
            (_, Some(0)) => problems.add("epochs: 0 epochs".into()),
            _ => {}
        }
    }

    /// A GPT reads token sequences, an MLP feature vectors.
    fn check_model_reads_the_data(&self, problems: &mut Problems) {
        let kind = self.data.kind;
        match self.model.kind {
            ModelKind::Gpt => problems.check(
                matches!(
                    kind,
                    DataKind::Addition
                        | DataKind::Text
                        | DataKind::TokenShards
                        | DataKind::UniformTokens
                ),
                format!(
                    "data.kind: a GPT reads token sequences (addition, text, token shards \
                     or uniform tokens), not {kind}"
                ),
            ),
            ModelKind::Mlp => problems.check(
                matches!(kind, DataKind::Idx | DataKind::Csv),
                format!("data.kind: an MLP reads feature vectors (idx or csv), not {kind}"),
            ),
        }
    }

    /// The model's window over text, its tokenizer over shards and its vocabulary over uniform
    /// tokens.
    fn check_data_fits_the_model(&self, problems: &mut Problems) {
        match self.data.kind {
            DataKind::Text => {
                let window = self.model.window(self.data.context);
                problems.check(
                    window >= 2,
                    format!("model.context: {window} characters per sample"),
                );
            }
            DataKind::TokenShards => {
                if let Some(problem) = self.pretrained_tokenizer_mismatch() {
                    problems.add(problem);
                }
            }
            DataKind::UniformTokens => problems.check(
                self.model.own_vocab().is_some_and(|v| v > 0),
                "data.kind: uniform tokens are drawn from the model's vocabulary: set \
                 model.vocab or model.preset"
                    .into(),
            ),
            DataKind::Addition | DataKind::Csv | DataKind::Idx => {}
        }
    }
}
