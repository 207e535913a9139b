//! Checks a configuration as a whole before anything is built, listing every problem.

use super::{DataKind, ModelKind, PrecisionKind, TrainConfig};
use crate::error::{Error, Result};

impl TrainConfig {
    /// Checks every setting and how they fit together.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        let mut check = |ok: bool, problem: String| {
            if !ok {
                problems.push(problem);
            }
        };
        match self.device.parse::<crate::device::DeviceChoice>() {
            Err(problem) => check(false, problem),
            Ok(device) => check(
                !self.memory.expandable_segments || device != crate::device::DeviceChoice::Cpu,
                "memory.expandable_segments: the CPU's memory cannot grow a region in place; \
                 it needs device = \"cuda\""
                    .into(),
            ),
        }
        match (self.steps, self.epochs) {
            (Some(_), Some(_)) => check(false, "give `steps` or `epochs`, not both".into()),
            (Some(0), _) => check(false, "steps: 0 steps".into()),
            (_, Some(0)) => check(false, "epochs: 0 epochs".into()),
            _ => {}
        }
        let m = &self.model;
        match m.kind {
            ModelKind::Gpt => {
                // The data, read later, may fix the vocabulary and the context: stand-ins for
                // what is not set here.
                let shape = headroom_nn::GptConfig {
                    vocab: m.vocab.unwrap_or(1),
                    context: m.context.unwrap_or(1),
                    width: m.width,
                    heads: m.heads,
                    layers: m.layers,
                    dropout: m.dropout,
                    tie_embeddings: m.tie_embeddings,
                };
                for (field, detail) in shape.problems() {
                    check(false, format!("model.{field}: {detail}"));
                }
                if let Some(eps) = m.norm_eps {
                    check(
                        eps.is_finite() && eps > 0.0,
                        format!("model.norm_eps: {eps} is not a positive number"),
                    );
                }
                for problem in m.pretrained_mismatches() {
                    check(false, problem);
                }
                check(
                    m.head_chunk != Some(0),
                    "model.head_chunk: a chunk of 0 rows; at least 1, or unset for the planner \
                     to choose"
                        .into(),
                );
                check(
                    matches!(
                        self.data.kind,
                        DataKind::Addition
                            | DataKind::Text
                            | DataKind::TokenShards
                            | DataKind::UniformTokens
                    ),
                    format!(
                        "data.kind: a GPT reads token sequences (addition, text, token shards \
                         or uniform tokens), not {}",
                        self.data.kind
                    ),
                );
            }
            ModelKind::Mlp => {
                check(
                    m.recompute.unwrap_or_default() == super::Recompute::None,
                    "model.recompute: recomputation runs a GPT's blocks again; an MLP has none"
                        .into(),
                );
                check(
                    m.head_chunk.is_none(),
                    "model.head_chunk: the fused head is a GPT's; an MLP has none".into(),
                );
                check(
                    m.hidden.iter().all(|&h| h > 0),
                    format!("model.hidden: {:?} has an empty layer", m.hidden),
                );
                check(
                    matches!(self.data.kind, DataKind::Idx | DataKind::Csv),
                    format!(
                        "data.kind: an MLP reads feature vectors (idx or csv), not {}",
                        self.data.kind
                    ),
                );
            }
        }
        let d = &self.data;
        match d.kind {
            DataKind::Addition => check(
                (1..=9).contains(&d.digits) && d.train_size > 0,
                format!(
                    "data: addition needs 1 to 9 digits and some training problems, got {} digits and {}",
                    d.digits, d.train_size
                ),
            ),
            DataKind::Text => {
                check(d.path.is_some(), "data.path: the text file to read".into());
                let window = self.model.window(d.context);
                check(
                    window >= 2,
                    format!("model.context: {window} characters per sample"),
                );
            }
            DataKind::TokenShards => {
                check(
                    d.path.is_some(),
                    "data.path: the directory `headroom prepare` wrote".into(),
                );
                if let Some(problem) = self.pretrained_tokenizer_mismatch() {
                    check(false, problem);
                }
                check(
                    d.eval_size > 0,
                    "data.eval_size: 0 held-out windows to judge the model on".into(),
                );
            }
            DataKind::UniformTokens => {
                check(
                    d.train_size > 0,
                    "data.train_size: 0 windows of uniform tokens".into(),
                );
                check(
                    self.model.own_vocab().is_some_and(|v| v > 0),
                    "data.kind: uniform tokens are drawn from the model's vocabulary: set \
                     model.vocab or model.preset"
                        .into(),
                );
            }
            DataKind::Csv => check(d.path.is_some(), "data.path: the CSV file to read".into()),
            DataKind::Idx => check(
                d.images.is_some() && d.labels.is_some(),
                "data.images and data.labels: the IDX files to read".into(),
            ),
        }
        check(
            d.prefetch > 0,
            "data.prefetch: at least one batch ahead".into(),
        );
        let b = &self.batch;
        check(b.size > 0, "batch.size: 0 samples per step".into());
        if let Some(micro) = b.micro {
            check(
                micro > 0 && micro <= b.size,
                format!(
                    "batch.micro: {micro} is not between 1 and the batch size {}",
                    b.size
                ),
            );
        }
        if let Some(margin) = b.margin {
            check(
                (0.0..0.9).contains(&margin),
                format!("batch.margin: {margin} is not in [0, 0.9)"),
            );
        }
        check(
            b.grow_after > 0,
            "batch.grow_after: at least 1 clean step".into(),
        );
        let o = &self.optimizer;
        check(
            o.lr.is_finite() && o.lr >= 0.0,
            format!(
                "optimizer.lr: {} is not a finite number of 0 or more (0 trains nothing, \
                 for sanity runs)",
                o.lr
            ),
        );
        check(
            o.weight_decay >= 0.0,
            format!("optimizer.weight_decay: {} is negative", o.weight_decay),
        );
        check(
            (0.0..1.0).contains(&o.beta1) && (0.0..1.0).contains(&o.beta2),
            format!(
                "optimizer: betas ({}, {}) must be in [0, 1)",
                o.beta1, o.beta2
            ),
        );
        check(
            o.eps > 0.0,
            format!("optimizer.eps: {} is not positive", o.eps),
        );
        check(
            (0.0..1.0).contains(&o.momentum),
            format!("optimizer.momentum: {} is not in [0, 1)", o.momentum),
        );
        check(
            o.clip >= 0.0,
            format!("optimizer.clip: {} is negative", o.clip),
        );
        check(
            o.state.unwrap_or_default() == super::StateKind::F32
                || o.kind == super::OptimizerKind::Adamw,
            format!(
                "optimizer.state: {} state is AdamW's; SGD keeps its momentum in f32",
                o.state.unwrap_or_default()
            ),
        );
        if o.in_backward == Some(true) {
            check(
                !o.shard_state,
                "optimizer.in_backward: each parameter is updated by the rank that keeps its \
                 state (optimizer.shard_state), once every rank's gradients are summed after the \
                 backward pass; turn one of them off"
                    .into(),
            );
            check(
                o.clip == 0.0,
                format!(
                    "optimizer.in_backward: clipping by the global norm (optimizer.clip = {}) \
                     needs every gradient before the first update; set optimizer.clip = 0",
                    o.clip
                ),
            );
            check(
                self.precision.dtype != PrecisionKind::F16,
                "optimizer.in_backward: f16 loss scaling checks every gradient for overflow \
                 before the first update; use precision bf16 or f32"
                    .into(),
            );
        }
        check(
            (0.0..=1.0).contains(&o.min_lr_ratio),
            format!(
                "optimizer.min_lr_ratio: {} is not in [0, 1]",
                o.min_lr_ratio
            ),
        );
        let p = &self.precision;
        if p.dtype == PrecisionKind::F16 {
            check(
                p.loss_scale >= 1.0,
                format!("precision.loss_scale: {} is below 1", p.loss_scale),
            );
            check(
                p.growth_factor > 1.0 && p.backoff_factor > 0.0 && p.backoff_factor < 1.0,
                format!(
                    "precision: growth factor {} must exceed 1 and backoff factor {} be in (0, 1)",
                    p.growth_factor, p.backoff_factor
                ),
            );
            check(
                p.growth_interval > 0,
                "precision.growth_interval: at least 1 step".into(),
            );
        }
        if let Err(Error::Config { problems: memory }) = self.memory.budget(self.default_limit()) {
            problems.extend(memory);
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Config { problems })
        }
    }
}
