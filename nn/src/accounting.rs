//! What a model and its optimizer hold in memory, from their own parameter lists.

use headroom_alloc::round_size;
use headroom_kernels::{Array, Device};

use crate::module::Module;
use crate::optim::Optimizer;

/// Bytes a model needs for training, by what holds them, each allocation rounded to the
/// allocator's granule (what the allocator really hands out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrainingMemory {
    /// The parameters and the frozen tensors.
    pub parameters: u64,
    /// One gradient per parameter (none for frozen tensors), as a backward pass produces them.
    pub gradients: u64,
    /// The optimizer's state (moments, momentum).
    pub optimizer_state: u64,
}

impl TrainingMemory {
    /// The sum: the floor below which no batch size fits.
    pub fn total(&self) -> u64 {
        self.parameters + self.gradients + self.optimizer_state
    }
}

/// The memory `model` and `optimizer` (if any) hold: parameters and their gradients from the
/// model's parameter list, optimizer state from the optimizer.
///
/// ```
/// use headroom_nn::{Activation, AdamW, AdamWConfig, Initializer, mlp, training_memory};
/// use headroom_kernels::{Device, DeviceConfig, DType};
/// let cpu = Device::cpu(DeviceConfig::new(16 << 20))?;
/// let model = mlp(&mut Initializer::new(&cpu, DType::F32, 0), &[64, 64], Activation::Relu)?;
/// let adamw = AdamW::new(&model, AdamWConfig::default())?;
/// let memory = training_memory(&model, Some(&adamw));
/// assert_eq!(memory.parameters, 16384 + 256); // a 64 x 64 f32 weight and a 64 f32 bias
/// assert_eq!(memory.optimizer_state, 2 * memory.parameters);
/// # Ok::<(), headroom_nn::Error>(())
/// ```
pub fn training_memory(model: &dyn Module, optimizer: Option<&dyn Optimizer>) -> TrainingMemory {
    held(model, optimizer, &|_| true)
}

/// [`training_memory`] on `device` alone: what a host tier holds (streamed weights with their
/// gradients, an offloaded optimizer's state) is left out.
pub fn training_memory_on(
    model: &dyn Module,
    optimizer: Option<&dyn Optimizer>,
    device: &Device,
) -> TrainingMemory {
    held(model, optimizer, &|a| a.device().same(device))
}

/// [`training_memory`] of the arrays `counts` accepts (a gradient lives where its parameter
/// does).
fn held(
    model: &dyn Module,
    optimizer: Option<&dyn Optimizer>,
    counts: &dyn Fn(&Array) -> bool,
) -> TrainingMemory {
    let bytes = |a: &Array| round_size(a.buffer().bytes() as u64).unwrap_or(u64::MAX);
    let (mut parameters, mut gradients) = (0u64, 0u64);
    model.visit(&mut |_, t| {
        if !counts(t.array()) {
            return;
        }
        parameters = parameters.saturating_add(bytes(t.array()));
        if t.is_variable() {
            gradients = gradients.saturating_add(bytes(t.array()));
        }
    });
    let optimizer_state = optimizer.map_or(0, |o| {
        let (state, _) = o.state();
        state
            .iter()
            .filter(|(_, a)| counts(a))
            .map(|(_, a)| bytes(a))
            .sum()
    });
    TrainingMemory {
        parameters,
        gradients,
        optimizer_state,
    }
}
