//! `[optimizer]`: the optimizer, its state, clipping and the learning-rate schedule.

use serde::{Deserialize, Serialize};

use super::Problems;
use super::warmup::{DEFAULT_WARMUP, Warmup};

/// The optimizer, clipping and the learning-rate schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimizerConfig {
    /// `adamw` or `sgd`.
    pub kind: OptimizerKind,
    /// The peak learning rate: finite, 0 or more (0 leaves the weights as they are, for
    /// sanity runs).
    pub lr: f64,
    /// Weight decay (decoupled for AdamW, L2 for SGD).
    pub weight_decay: f64,
    /// AdamW's first-moment decay.
    pub beta1: f64,
    /// AdamW's second-moment decay.
    pub beta2: f64,
    /// AdamW's epsilon.
    pub eps: f64,
    /// SGD's momentum.
    pub momentum: f64,
    /// Largest global gradient norm (0: no clipping).
    pub clip: f64,
    /// How AdamW keeps its moments: `f32` (the parameters' dtype), `bf16` or `int8`
    /// (block-wise, 2048 values a scale). Unset: the memory policy chooses (`f32` under
    /// `memory.policy = "manual"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<StateKind>,
    /// Update each parameter inside the backward pass, as soon as its gradient is complete,
    /// and free that gradient at once, when a step is one micro-batch (a step cut in several
    /// accumulates as usual). Needs `clip = 0` and no f16 loss scaling, which need every
    /// gradient before any update. Unset: the memory policy chooses (off under
    /// `memory.policy = "manual"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_backward: Option<bool>,
    /// Shard the optimizer's state over the ranks of a data-parallel run (ZeRO stage 1): each
    /// rank keeps the state of its share of the parameters, updates those and sends them to
    /// the others. A run of one process keeps all of it. Not with `in_backward`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shard_state: bool,
    /// Shard the parameters themselves over the ranks (ZeRO stage 3, FSDP): each rank keeps
    /// a flat chunk of every tensor, of its gradient and of the optimizer's state over it,
    /// gathers each block's tensors from every rank as the block runs (again in the backward
    /// pass where whole blocks are recomputed), and sums the gradients into each rank's chunk
    /// (a reduce-scatter). Each rank writes its chunks to its own file of a checkpoint, which
    /// resumes on any number of ranks (with int8 state, whose blocks follow each rank's chunk,
    /// on as many). A base stored quantized (QLoRA) keeps its chunk of whole blocks of codes.
    /// Built-in GPTs alone; not with `shard_state` (it shards the state already),
    /// `in_backward` or streamed weights.
    /// With `offload` each rank keeps its chunks of the state in its host tier and updates
    /// them there. Unset: the memory policy shards a run of several ranks where that is
    /// faster or where nothing whole fits (never under `memory.policy = "manual"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard_params: Option<bool>,
    /// Shard the gradients and the optimizer state, each rank keeping whole weights (ZeRO
    /// stage 2, FSDP2 without resharding after the forward pass): the parameters are sharded
    /// as `shard_params` shards them, and each tensor's gathered copy is kept from its first
    /// use in a step until the update, so that the weights are gathered once a step.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shard_grads: bool,
    /// Keep the state in the host tier (`memory.host_limit`) and run each update there
    /// (ZeRO-Offload): the parameter and its gradient are copied into the host's copies of
    /// them (kept there beside the state), updated by a host thread while the device goes on
    /// (with `in_backward`, on with the backward pass), and the parameter copied back, so the
    /// device holds no optimizer state. The same updates, bit for bit, where the host computes
    /// as the device does. Not with `shard_state`.
    /// Unset: the memory policy offloads where nothing faster fits (never under
    /// `memory.policy = "manual"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload: Option<bool>,
    /// This process's rank and the number of ranks, as the launcher started it: set at launch,
    /// never read from or written to a file. With `shard_state` it decides which share of the
    /// state the optimizer keeps.
    #[serde(skip)]
    pub launched_as: Option<(usize, usize)>,
    /// `constant` or `warmup-cosine`.
    pub schedule: ScheduleKind,
    /// Linear warmup: steps (an integer, `50`) or a fraction of the run's steps (`0.03`, the
    /// default: 3%, rounded up).
    pub warmup: Warmup,
    /// The last learning rate of the cosine, as a fraction of `lr`.
    pub min_lr_ratio: f64,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        Self {
            kind: OptimizerKind::Adamw,
            lr: 3e-3,
            weight_decay: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            momentum: 0.9,
            clip: 1.0,
            state: None,
            in_backward: None,
            shard_state: false,
            shard_params: None,
            shard_grads: false,
            offload: None,
            launched_as: None,
            schedule: ScheduleKind::WarmupCosine,
            warmup: DEFAULT_WARMUP,
            min_lr_ratio: 0.1,
        }
    }
}

/// The optimizers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OptimizerKind {
    /// AdamW.
    Adamw,
    /// SGD with momentum.
    Sgd,
}

/// How an optimizer keeps its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StateKind {
    /// In the parameters' dtype.
    #[default]
    F32,
    /// bf16, rounded stochastically.
    Bf16,
    /// Block-wise 8-bit (Dettmers et al. 2022), rounded stochastically.
    Int8,
}

impl StateKind {
    /// The optimizers' name for it.
    pub fn precision(self) -> headroom_nn::StatePrecision {
        match self {
            StateKind::F32 => headroom_nn::StatePrecision::Full,
            StateKind::Bf16 => headroom_nn::StatePrecision::Bf16,
            StateKind::Int8 => headroom_nn::StatePrecision::Int8,
        }
    }
}

/// The schedules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleKind {
    /// The same rate throughout.
    Constant,
    /// Linear warmup, then cosine decay to `min_lr_ratio * lr`.
    WarmupCosine,
}

impl OptimizerConfig {
    /// Whether the parameters are sharded over the ranks (`shard_params`).
    pub fn shards_params(&self) -> bool {
        self.shard_params == Some(true) || self.shard_grads
    }

    /// Whether the state and the updates are in the host tier (`offload`).
    pub fn offloads(&self) -> bool {
        self.offload == Some(true)
    }

    /// The problems of the optimizer's own settings (how the update in the backward pass fits
    /// the precision is checked with the whole configuration).
    pub(super) fn check(&self, problems: &mut Problems) {
        problems.check(
            self.lr.is_finite() && self.lr >= 0.0,
            format!(
                "optimizer.lr: {} is not a finite number of 0 or more (0 trains nothing, \
                 for sanity runs)",
                self.lr
            ),
        );
        problems.check(
            self.weight_decay >= 0.0,
            format!("optimizer.weight_decay: {} is negative", self.weight_decay),
        );
        problems.check(
            (0.0..1.0).contains(&self.beta1) && (0.0..1.0).contains(&self.beta2),
            format!(
                "optimizer: betas ({}, {}) must be in [0, 1)",
                self.beta1, self.beta2
            ),
        );
        problems.check(
            self.eps > 0.0,
            format!("optimizer.eps: {} is not positive", self.eps),
        );
        problems.check(
            (0.0..1.0).contains(&self.momentum),
            format!("optimizer.momentum: {} is not in [0, 1)", self.momentum),
        );
        problems.check(
            self.clip >= 0.0,
            format!("optimizer.clip: {} is negative", self.clip),
        );
        problems.check(
            self.state.unwrap_or_default() == StateKind::F32 || self.kind == OptimizerKind::Adamw,
            format!(
                "optimizer.state: {} state is AdamW's; SGD keeps its momentum in f32",
                self.state.unwrap_or_default()
            ),
        );
        problems.check(
            !(self.offloads() && self.shard_state),
            "optimizer.offload: a sharded state (optimizer.shard_state) is shared between the \
             ranks' devices; turn one of them off"
                .into(),
        );
        problems.check(
            !(self.shard_grads && self.shard_params == Some(false)),
            "optimizer.shard_grads: it shards the parameters as shard_params does, and keeps \
             their gathered copies; turn shard_params = false off"
                .into(),
        );
        if self.shards_params() {
            let with = |setting: &str| {
                format!("optimizer.shard_params: not with {setting} yet; turn one of them off")
            };
            problems.check(!self.shard_state, "optimizer.shard_params: it keeps each rank's share of the state already; turn optimizer.shard_state off".into());
            problems.check(
                self.in_backward != Some(true),
                with("optimizer.in_backward"),
            );
        }
        if self.in_backward == Some(true) {
            problems.check(
                !self.shard_state,
                "optimizer.in_backward: each parameter is updated by the rank that keeps its \
                 state (optimizer.shard_state), once every rank's gradients are summed after the \
                 backward pass; turn one of them off"
                    .into(),
            );
            problems.check(
                self.clip == 0.0,
                format!(
                    "optimizer.in_backward: clipping by the global norm (optimizer.clip = {}) \
                     needs every gradient before the first update; set optimizer.clip = 0",
                    self.clip
                ),
            );
        }
        if let Some(problem) = self.warmup.problem() {
            problems.add(problem);
        }
        problems.check(
            (0.0..=1.0).contains(&self.min_lr_ratio),
            format!(
                "optimizer.min_lr_ratio: {} is not in [0, 1]",
                self.min_lr_ratio
            ),
        );
    }
}
