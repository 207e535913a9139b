//! What a plan says when a full fine-tune of a GPT fits nothing: the LoRA run that would fit
//! (adapters over the frozen model kept in bf16). LoRA changes what is trained, so the memory
//! policy never switches to it by itself; the plan names it for the user to choose.

use headroom_alloc::format_bytes;
use headroom_kernels::PlanTarget;
use headroom_nn::lora::LoraConfig;

use crate::config::{ModelKind, ParamDtype, TrainConfig};
use crate::data::Task;
use crate::planning::{Budget, plan};

/// The sentence naming the LoRA run (default adapters, a bf16 base) that fits where `config`,
/// a full fine-tune of a GPT, does not: its micro-batch, its predicted peak and how to ask for
/// it. `None` for a LoRA run already, a model that is not a GPT, or when LoRA does not fit
/// either.
pub fn lora_advice(
    config: &TrainConfig,
    task: &Task,
    budget: &Budget,
    target: PlanTarget,
) -> Option<String> {
    if config.model.kind != ModelKind::Gpt || config.model.lora.is_some() {
        return None;
    }
    let mut adapted = config.clone();
    let lora = LoraConfig::default();
    adapted.model.lora = Some(lora.clone());
    adapted.model.param_dtype = ParamDtype::Bf16;
    let chosen = plan(&adapted, task, budget, target).ok()?;
    Some(format!(
        "a full fine-tune fits nothing, but LoRA would (rank {}, alpha {}, every linear \
         layer of the blocks, the base frozen in bf16; [model.lora] with model.param_dtype = \
         \"bf16\", or --lora --param-dtype bf16): micro-batches of {}, predicted peak {}, \
         training {} of the model's parameters",
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
        crate::model::TrainModel::build(&config.model, &task.train.shape(), &device, 0).ok()?;
    let module = model.module();
    let (trained, frozen) = (module.parameter_count(), module.frozen_count());
    Some(format!(
        "{:.2}%",
        100.0 * trained as f64 / (trained + frozen).max(1) as f64
    ))
}
