//! `[distributed]`: what the ranks of a run shard among themselves, by ZeRO's stages.

use serde::{Deserialize, Serialize};

use super::OptimizerConfig;

/// How the ranks of a run share its training state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DistributedConfig {
    /// What each rank keeps only its share of: `state` (ZeRO stage 1,
    /// `optimizer.shard_state`), `grads` (stage 2, `optimizer.shard_grads`) or `params`
    /// (stage 3, `optimizer.shard_params`). Unset: the optimizer's settings say, and the
    /// memory policy may shard the parameters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardLevel>,
}

impl DistributedConfig {
    /// Whether nothing is set.
    pub fn is_unset(&self) -> bool {
        self.shard.is_none()
    }
}

/// A ZeRO stage by what it shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardLevel {
    /// The optimizer state (stage 1).
    State,
    /// The gradients and the state (stage 2): whole weights, gathered once a step.
    Grads,
    /// The parameters, the gradients and the state (stage 3).
    Params,
}

impl ShardLevel {
    /// Its name in configurations.
    pub fn name(self) -> &'static str {
        match self {
            ShardLevel::State => "state",
            ShardLevel::Grads => "grads",
            ShardLevel::Params => "params",
        }
    }

    /// Sets the optimizer's settings this level stands for.
    pub fn apply(self, optimizer: &mut OptimizerConfig) {
        match self {
            ShardLevel::State => optimizer.shard_state = true,
            ShardLevel::Grads => optimizer.shard_grads = true,
            ShardLevel::Params => optimizer.shard_params = Some(true),
        }
    }

    /// The level the optimizer's settings stand for, where they pin one.
    pub fn of(optimizer: &OptimizerConfig) -> Option<Self> {
        if optimizer.shard_grads {
            Some(ShardLevel::Grads)
        } else if optimizer.shard_params == Some(true) {
            Some(ShardLevel::Params)
        } else if optimizer.shard_state {
            Some(ShardLevel::State)
        } else {
            None
        }
    }
}
