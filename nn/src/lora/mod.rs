//! Low-rank adapters (LoRA, Hu et al. 2021) over a frozen decoder, as PEFT builds them: each
//! targeted linear layer's output gains `scale * B A dropout(x)`, `A` of `[rank, in]` drawn at
//! random and `B` of `[out, rank]` zeros, so that training starts from the base model. Every
//! other tensor is frozen: no gradient, no optimizer state, and the backward pass computes
//! only what the adapters and the inputs need (a frozen product keeps none of its input).
//!
//! ```
//! use headroom_nn::{Family, Gpt, GptConfig, Initializer, Module, lora};
//! use headroom_autograd::Tensor;
//! use headroom_kernels::{Device, DeviceConfig, DType};
//! let cpu = Device::cpu(DeviceConfig::new(64 << 20))?;
//! let config = GptConfig {
//!     vocab: 16, context: 8, width: 32, heads: 4, layers: 2, dropout: 0.0,
//!     tie_embeddings: false, family: Family::Gpt2,
//! };
//! let mut gpt = Gpt::new(&mut Initializer::new(&cpu, DType::F32, 1), config)?;
//! let ids = Tensor::from_host(&cpu, [1, 4], &[1u32, 2, 3, 4])?;
//! let before = gpt.forward(&ids)?.to_f64()?;
//! let adapters = lora::LoraConfig { rank: 4, ..Default::default() };
//! let attached = lora::attach(&mut gpt, &adapters, &mut Initializer::new(&cpu, DType::F32, 2))?;
//! assert_eq!(attached.modules, 8); // c_attn, c_proj, c_fc and mlp.c_proj in each block
//! assert_eq!(gpt.parameter_count(), attached.trainable);
//! assert_eq!(gpt.forward(&ids)?.to_f64()?, before); // B starts at zero
//! # Ok::<(), headroom_nn::Error>(())
//! ```

mod attach;
mod config;
mod merge;

pub use crate::layers::lora_adapter::{LoraAdapter, LoraPart};
pub use attach::{Attached, attach, cast_frozen};
pub use config::{AllLinear, LoraConfig, LoraTargets, QuantizedBase};
pub use merge::merge;

use headroom_autograd::Tensor;

use crate::error::Result;
use crate::module::Module;

/// Every linear layer of `gpt`'s blocks an adapter can go on, in visiting order.
pub(crate) fn adaptable_layers(gpt: &mut crate::Gpt) -> Vec<&mut crate::Linear> {
    attach::adaptable(gpt)
        .into_iter()
        .map(|a| a.layer)
        .collect()
}

/// True for the name of an adapter's tensor (`...lora_A.weight`, `...lora_B.weight`): what a
/// base model's file has no entry for.
pub fn is_adapter_name(name: &str) -> bool {
    name.split('.')
        .any(|part| part == "lora_A" || part == "lora_B")
}

/// Calls `f` with every tensor of `module` but its adapters': the base model, as a Hugging
/// Face file holds it.
pub fn visit_base(module: &dyn Module, f: &mut dyn FnMut(&str, &Tensor)) {
    module.visit(&mut |name, t| {
        if !is_adapter_name(name) {
            f(name, t);
        }
    });
}

/// The same, mutably (to load a base model's weights under adapters).
pub fn visit_base_mut(
    module: &mut dyn Module,
    f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
) -> Result<()> {
    module.visit_mut(&mut |name, t| match is_adapter_name(name) {
        true => Ok(()),
        false => f(name, t),
    })
}

/// Every tensor of the base model with its name, in visiting order.
pub fn base_tensors(module: &dyn Module) -> Vec<(String, Tensor)> {
    let mut out = Vec::new();
    visit_base(module, &mut |name, t| {
        out.push((name.to_owned(), t.clone()))
    });
    out
}
