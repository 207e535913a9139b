//! Where a run offloads: its host tier, a second pool of memory over host memory with an
//! allocator of its own (limit, tags, statistics, out-of-memory reports), that holds what the
//! device does not need for a while: the inputs of recomputed blocks between their forward and backward passes
//! (`model.offload_activations`), the optimizer's state, whose updates run there
//! (`optimizer.offload`), and the blocks' weights, streamed to the device as they run
//! (`model.offload_weights`). A run opens one over real host memory; a probe plans one on
//! a meta device, whose copies to and from it are priced at the transfer rate and whose own
//! work (the offloaded updates) at the host's rates, beside the device's on a GPU.
//!
//! The rule: the tier's limit is `memory.host_limit`; unset, a run's is the machine's memory
//! and a plan's has none, so that a plan says what the host must hold instead of depending on
//! the machine it was made on.

use headroom_alloc::AllocatorConfig;
use headroom_collectives::SharedWorld;
use headroom_kernels::{Device, DeviceConfig, Rates};

use headroom_nn::Optimizer;

use crate::config::TrainConfig;
use crate::data::DataShape;
use crate::error::{Error, Result};
use crate::model::{ModelFactory, ModelSettings, Offloads, TrainableModel};
use crate::planning::budget::UNLIMITED;
use crate::step::optimizer::build_optimizer;

/// What a run keeps on the host when the machine's memory cannot be read.
const FALLBACK_HOST_MEMORY: u64 = 64 << 30;

/// Whether a run of `config` keeps anything in the host tier.
pub fn wanted(config: &TrainConfig) -> bool {
    config.model.offloads_activations()
        || config.model.offloads_weights()
        || config.optimizer.offloads()
}

/// What the model of `config` keeps on `host`: its recomputed blocks' inputs where `config`
/// offloads activations, its blocks' weights where it streams them, fetched ahead unless it
/// says not.
pub fn for_model(config: &TrainConfig, host: Option<&Device>) -> Offloads {
    let on = |wanted: bool| host.filter(|_| wanted).cloned();
    Offloads {
        activations: on(config.model.offloads_activations()),
        weights: on(config.model.offloads_weights()),
        ahead: config.model.fetches_ahead(),
    }
}

/// The model of `config` that `factory` builds on `device` for samples of `shape`, drawn and
/// kept where the configuration says (its streamed weights and offloaded inputs on `host`),
/// and its optimizer (its state on `host` where offloaded). `prepare` runs between the build
/// and the move to the host tier: a run's initialization, which may load weights onto the
/// device. Where `optimizer.shard_params` is set, the model's tensors are then cut to this
/// rank's chunks of `world` (a probe's planned rank), before the optimizer's state is made.
pub fn build_training_state(
    config: &TrainConfig,
    (factory, device, host): (&dyn ModelFactory, &Device, Option<&Device>),
    shape: &DataShape,
    world: Option<&SharedWorld>,
    prepare: impl FnOnce(&mut dyn TrainableModel) -> Result<()>,
) -> Result<(Box<dyn TrainableModel>, Box<dyn Optimizer>)> {
    let shards = match config.optimizer.shards_params() {
        true => Some(world.ok_or_else(|| {
            Error::config("optimizer.shard_params: no world of ranks to shard the parameters over")
        })?),
        false => None,
    };
    let settings = ModelSettings {
        shards: shards.cloned(),
        ..ModelSettings::with_host_tier(config, host)
    };
    let mut model = factory.build(device, shape, &settings)?;
    prepare(&mut *model)?;
    // A model that was not drawn sharded is cut now.
    if let Some(world) = shards.filter(|_| model.param_shards().is_none()) {
        model.shard_params(world)?;
    }
    if config.optimizer.shard_grads {
        model.keep_gathered()?;
    }
    model.set_host_tier(&for_model(config, host))?;
    let optimizer = build_optimizer(&config.optimizer, model.module(), host)?;
    Ok((model, optimizer))
}

/// The host tier a run of `config` on `device` opens (page-locked memory for a CUDA device);
/// none unless it offloads.
pub fn open(config: &TrainConfig, device: &Device) -> Result<Option<Device>> {
    if !wanted(config) {
        return Ok(None);
    }
    let limit = limit(config).unwrap_or_else(machine_memory);
    let allocator = AllocatorConfig::default().with_history(config.memory.history);
    let tier = DeviceConfig::new(limit).with_allocator(allocator);
    Ok(Some(Device::host_tier_of(device, tier)?))
}

/// The host tier a probe of `config` plans beside `device`, a meta device (its work priced at
/// the host's `rates` on the host's queue of the device's timeline); none unless it offloads.
pub fn planned(config: &TrainConfig, device: &Device, rates: Rates) -> Result<Option<Device>> {
    if !wanted(config) {
        return Ok(None);
    }
    let limit = limit(config).unwrap_or(UNLIMITED);
    let tier = DeviceConfig::new(limit);
    Ok(Some(Device::meta_host_tier_of(device, tier, rates)?))
}

/// The host tier's limit that `config` sets, if it does.
fn limit(config: &TrainConfig) -> Option<u64> {
    config.memory.host_limit.as_ref().map(|limit| limit.bytes())
}

/// The machine's memory (Linux's `MemTotal`), or [`FALLBACK_HOST_MEMORY`].
pub(crate) fn machine_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib << 10)
        })
        .unwrap_or(FALLBACK_HOST_MEMORY)
}
