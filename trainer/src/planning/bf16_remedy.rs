//! The last resort a diagnosis names when a GPT's f32 training state alone exceeds the limit:
//! bf16 parameters (`model.param_dtype = "bf16"`), which the memory policy never chooses.

use headroom_alloc::format_bytes;
use headroom_kernels::DType;
use headroom_nn::{Optimizer, StatePrecision, TrainingMemory};

use crate::model::{TrainModel, TrainableModel};

/// What the weights, gradients and optimizer state of a built-in GPT whose parameters are all
/// f32 would take in bf16 (a state kept in the parameter's dtype halves with them; a bf16 or
/// 8-bit state stays), or `None` for any other model.
pub(crate) fn bf16_training_memory(
    model: &dyn TrainableModel,
    optimizer: &dyn Optimizer,
    memory: &TrainingMemory,
) -> Option<TrainingMemory> {
    let Some(TrainModel::Gpt(gpt)) = model.as_any().downcast_ref::<TrainModel>() else {
        return None;
    };
    let mut all_f32 = true;
    headroom_nn::Module::visit(gpt.as_ref(), &mut |_, p| all_f32 &= p.dtype() == DType::F32);
    if !all_f32 {
        return None;
    }
    let state = match optimizer.buffers().precision() {
        StatePrecision::Full => memory.optimizer_state / 2,
        StatePrecision::Bf16 | StatePrecision::Int8 => memory.optimizer_state,
    };
    Some(TrainingMemory {
        parameters: memory.parameters / 2,
        gradients: memory.gradients / 2,
        optimizer_state: state,
    })
}

/// The remedy's sentence where bf16 parameters would bring the training state under `limit`:
/// what they would take and by how much less.
pub(crate) fn bf16_remedy(
    model: &dyn TrainableModel,
    optimizer: &dyn Optimizer,
    memory: &TrainingMemory,
    limit: u64,
) -> Option<String> {
    let bf16 = bf16_training_memory(model, optimizer, memory)?;
    (bf16.total() < limit).then(|| {
        format!(
            "; as a last resort, keep the parameters in bf16 (model.param_dtype = \"bf16\", \
             --param-dtype bf16: updates rounded stochastically), whose weights, gradients and \
             optimizer state take {}, {} less, leaving {} of the limit",
            format_bytes(bf16.total()),
            format_bytes(memory.total() - bf16.total()),
            format_bytes(limit - bf16.total()),
        )
    })
}
