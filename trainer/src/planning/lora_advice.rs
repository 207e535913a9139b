//! What a plan says when a GPT's run fits nothing: the LoRA run that would fit (adapters over
//! the frozen model kept in bf16) and the QLoRA run (the frozen base stored in NF4). LoRA
//! changes what is trained, and QLoRA the base's values, so the memory policy never switches to
//! either by itself; the plan names the run for the user to choose.

use headroom_alloc::format_bytes;
use headroom_kernels::PlanTarget;
use headroom_nn::lora::{LoraConfig, QuantizedBase};

use crate::config::{ModelKind, ParamDtype, TrainConfig};
use crate::data::Task;
use crate::planning::{Budget, plan};

/// The sentence naming the runs that fit where `config`, a GPT's, does not: for a full
/// fine-tune, LoRA with default adapters over a bf16 base and QLoRA; for LoRA over a base kept
/// as tensors, QLoRA with the same adapters. Each with its micro-batch, its predicted peak and
/// how to ask for it. `None` for a model that is not a GPT, a QLoRA run already, or when none
/// of them fits either.
pub fn lora_advice(
    config: &TrainConfig,
    task: &Task,
    budget: &Budget,
    target: PlanTarget,
) -> Option<String> {
    if config.model.kind != ModelKind::Gpt {
        return None;
    }
    let (what, bases): (&str, &[Option<QuantizedBase>]) = match &config.model.lora {
        None => ("a full fine-tune", &[None, Some(QuantizedBase::Nf4)]),
        Some(lora) if lora.base.is_none() => ("LoRA", &[Some(QuantizedBase::Nf4)]),
        Some(_) => return None,
    };
    let runs: Vec<String> = bases
        .iter()
        .filter_map(|&base| adapted_run(config, task, (budget, target), base))
        .collect();
    (!runs.is_empty()).then(|| format!("{what} fits nothing, but {}", runs.join("; and ")))
}

/// The sentence naming the LoRA run over a bf16 base (`base` none) or the QLoRA run over
/// `base` that would fit where `config` does not, with its micro-batch, predicted peak and how
/// to ask for it; none when it does not fit either.
fn adapted_run(
    config: &TrainConfig,
    task: &Task,
    (budget, target): (&Budget, PlanTarget),
    base: Option<QuantizedBase>,
) -> Option<String> {
    let mut adapted = config.clone();
    let lora = LoraConfig {
        base,
        ..config.model.lora.clone().unwrap_or_default()
    };
    adapted.model.lora = Some(lora.clone());
    adapted.model.param_dtype = ParamDtype::Bf16;
    let chosen = plan(&adapted, task, budget, target).ok()?;
    let (run, storage, flags) = match base {
        None => (
            "LoRA",
            "frozen in bf16",
            "[model.lora] with model.param_dtype = \"bf16\", or --lora --param-dtype bf16",
        ),
        Some(_) => (
            "QLoRA",
            "stored in NF4",
            "[model.lora] base = \"nf4\" with model.param_dtype = \"bf16\", or --base nf4 \
             --param-dtype bf16",
        ),
    };
    Some(format!(
        "{run} would (rank {}, alpha {}, the base {storage}; {flags}): micro-batches of {}, \
         predicted peak {}, training {} of the model's parameters",
        lora.rank,
        lora.alpha,
        chosen.micro,
        format_bytes(chosen.predicted_peak),
        trained_share(&adapted, task).unwrap_or_else(|| "a small share".into()),
    ))
}

/// The share of the parameters a LoRA run of `config` trains, as a percentage, from a model
/// built on a meta device.
fn trained_share(config: &TrainConfig, task: &Task) -> Option<String> {
    let device =
        headroom_kernels::Device::meta(headroom_kernels::DeviceConfig::new(u64::MAX / 4)).ok()?;
    let model =
        crate::model::TrainModel::build(&config.model, &task.train.shape(), &device, (0, None))
            .ok()?;
    let module = model.module();
    let (trained, frozen) = (module.parameter_count(), module.frozen_count());
    Some(format!(
        "{:.2}%",
        100.0 * trained as f64 / (trained + frozen).max(1) as f64
    ))
}
