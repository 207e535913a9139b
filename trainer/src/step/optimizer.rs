//! The optimizer and learning-rate schedule a configuration describes.

use headroom_kernels::Device;
use headroom_nn::{AdamW, AdamWConfig, LrSchedule, Module, Optimizer, Sgd, SgdConfig, StateShard};

use crate::config::{OptimizerConfig, OptimizerKind, ScheduleKind};
use crate::error::Result;

/// The optimizer for `model`, its state allocated now: all of it, or this rank's share where
/// the configuration shards it over the ranks it was launched with; on `host` (the host tier)
/// where the configuration offloads it.
pub fn build_optimizer(
    config: &OptimizerConfig,
    model: &dyn Module,
    host: Option<&Device>,
) -> Result<Box<dyn Optimizer>> {
    let host = host.filter(|_| config.offloads());
    let shard = match (config.shard_state, config.launched_as) {
        (true, Some((rank, ranks))) => StateShard::balanced(model, rank, ranks)?,
        _ => StateShard::whole(model),
    };
    Ok(match config.kind {
        OptimizerKind::Adamw => Box::new(AdamW::with_shard_on(
            model,
            AdamWConfig {
                lr: config.lr,
                beta1: config.beta1,
                beta2: config.beta2,
                eps: config.eps,
                weight_decay: config.weight_decay,
            },
            config.state.unwrap_or_default().precision(),
            shard,
            host,
        )?),
        OptimizerKind::Sgd => Box::new(Sgd::with_shard_on(
            model,
            SgdConfig {
                lr: config.lr,
                momentum: config.momentum,
                weight_decay: config.weight_decay,
                ..SgdConfig::default()
            },
            shard,
            host,
        )?),
    })
}

/// The learning-rate schedule over `total` steps.
pub fn schedule(config: &OptimizerConfig, total: u64) -> LrSchedule {
    match config.schedule {
        ScheduleKind::Constant => LrSchedule::Constant(config.lr),
        ScheduleKind::WarmupCosine => LrSchedule::WarmupCosine {
            peak: config.lr,
            min: config.lr * config.min_lr_ratio,
            warmup: config.warmup.steps(total),
            total,
        },
    }
}
