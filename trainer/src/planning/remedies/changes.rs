//! The changes to a built-in model's run that `headroom plan` plans when nothing fits, from
//! the one that changes the least: under the manual policy, recomputed blocks and then the
//! memory policy; products in bf16; bf16 parameters; LoRA over a bf16 base; QLoRA over an NF4
//! base. A change already in force, or that the configuration would refuse, is left out.

use headroom_kernels::{Device, DeviceConfig};
use headroom_nn::lora::{LoraConfig, QuantizedBase};

use crate::config::{ModelKind, ParamDtype, PolicyKind, PrecisionKind, Recompute, TrainConfig};
use crate::data::Task;
use crate::model::{BuiltinModel, ModelFactory, TrainModel};
use crate::planning::budget::{Budget, UNLIMITED};

/// One change to a run, as a user asks for it.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    /// The flags that ask for it (`headroom plan` and `headroom train` take the same).
    pub flags: String,
    /// The configuration's keys that ask for it.
    pub keys: String,
    /// What it changes, in a few words; empty where the flags say it all.
    pub what: String,
    /// The run with the change.
    pub config: TrainConfig,
    /// Its memory budget.
    pub budget: Budget,
}

/// The changes to try for `config`, a built-in model's run on `task` that fits nothing under
/// `budget`, in order, each valid and none already in force.
pub(crate) fn changes(config: &TrainConfig, task: &Task, budget: &Budget) -> Vec<Change> {
    let mut changes = Vec::new();
    if config.memory.policy == PolicyKind::Manual {
        let knobs = BuiltinModel(config.model.clone()).knobs(&task.train.shape());
        let recomputed = config.model.recompute.unwrap_or_default() >= Recompute::Blocks;
        if knobs.block_recompute && !recomputed {
            changes.push(change(
                (config, budget),
                ("--recompute", "model.recompute = \"blocks\""),
                "each block run again in the backward pass",
                |c| c.model.recompute = Some(Recompute::Blocks),
            ));
        }
        changes.push(change(
            (config, budget),
            ("--memory-policy auto", "memory.policy = \"auto\""),
            "the memory policy choosing the memory techniques",
            |c| c.memory.policy = PolicyKind::Auto,
        ));
    }
    if config.compute_precision() == PrecisionKind::F32 {
        changes.push(change(
            (config, budget),
            ("--precision bf16", "precision.dtype = \"bf16\""),
            "the products in bf16",
            |c| c.precision.dtype = PrecisionKind::Bf16,
        ));
    }
    if config.model.kind == ModelKind::Gpt {
        changes.extend(gpt_changes(config, task, budget));
    }
    changes
        .into_iter()
        .filter(|c| c.config.validate().is_ok())
        .collect()
}

/// A GPT's changes: bf16 parameters, LoRA, QLoRA (each that is not in force already).
fn gpt_changes(config: &TrainConfig, task: &Task, budget: &Budget) -> Vec<Change> {
    let mut changes = Vec::new();
    let full = config.model.lora.is_none();
    if full && config.model.param_dtype == ParamDtype::F32 {
        changes.push(change(
            (config, budget),
            ("--param-dtype bf16", "model.param_dtype = \"bf16\""),
            "a full fine-tune with bf16 parameters, updates rounded stochastically",
            |c| c.model.param_dtype = ParamDtype::Bf16,
        ));
    }
    let lora = config.model.lora.clone().unwrap_or_default();
    // The adapters want a bf16 base: asked for with them unless the parameters are bf16.
    let (bf16_flag, bf16_key) = match config.model.param_dtype {
        ParamDtype::F32 => (" --param-dtype bf16", " with model.param_dtype = \"bf16\""),
        ParamDtype::Bf16 => ("", ""),
    };
    if full {
        changes.push(change(
            (config, budget),
            (
                &format!("--lora{bf16_flag}"),
                &format!("[model.lora]{bf16_key}"),
            ),
            &format!(
                "LoRA: adapters of rank {} (alpha {}) over the frozen model in bf16{}",
                lora.rank,
                lora.alpha,
                trained(config, task, None)
            ),
            |c| {
                c.model.lora = Some(LoraConfig::default());
                c.model.param_dtype = ParamDtype::Bf16;
            },
        ));
    }
    if lora.base.is_none() {
        changes.push(change(
            (config, budget),
            (
                &format!("--base nf4{bf16_flag}"),
                &format!("[model.lora] base = \"nf4\"{bf16_key}"),
            ),
            &format!(
                "QLoRA: adapters of rank {} (alpha {}) over the frozen model stored in NF4{}",
                lora.rank,
                lora.alpha,
                trained(config, task, Some(QuantizedBase::Nf4))
            ),
            |c| {
                let lora = c.model.lora.get_or_insert_with(LoraConfig::default);
                lora.base = Some(QuantizedBase::Nf4);
                c.model.param_dtype = ParamDtype::Bf16;
            },
        ));
    }
    changes
}

/// `config` changed by `apply`, under `budget`, asked for with `flags` and `keys`.
fn change(
    (config, budget): (&TrainConfig, &Budget),
    (flags, keys): (&str, &str),
    what: &str,
    apply: impl FnOnce(&mut TrainConfig),
) -> Change {
    let mut changed = config.clone();
    apply(&mut changed);
    Change {
        flags: flags.into(),
        keys: keys.into(),
        what: what.into(),
        config: changed,
        budget: *budget,
    }
}

/// The share of the model's parameters that LoRA adapters over `base` train in `config`'s
/// model, as words to follow the adapters' description: from a model built on a meta device
/// (empty if it cannot be).
fn trained(config: &TrainConfig, task: &Task, base: Option<QuantizedBase>) -> String {
    let mut adapted = config.model.clone();
    adapted.lora = Some(LoraConfig {
        base,
        ..config.model.lora.clone().unwrap_or_default()
    });
    adapted.param_dtype = ParamDtype::Bf16;
    let Ok(device) = Device::meta(DeviceConfig::new(UNLIMITED)) else {
        return String::new();
    };
    let Ok(model) = TrainModel::build(&adapted, &task.train.shape(), &device, (0, None)) else {
        return String::new();
    };
    let module = model.module();
    let (trained, frozen) = (module.parameter_count(), module.frozen_count());
    format!(
        ", training {:.2}% of the model's parameters",
        100.0 * trained as f64 / (trained + frozen).max(1) as f64
    )
}
