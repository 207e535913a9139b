//! The `Module` trait: a forward pass and a visitor over named parameters, so that optimizers,
//! checkpoints and trainers need no per-model code.

use headroom_autograd::Tensor;
use headroom_kernels::ops::quant::Quantized;

use crate::error::Result;

/// A layer or a model.
///
/// Its tensors are named like PyTorch state-dict keys (`blocks.0.attn.qkv.weight`), relative
/// to the module; containers prefix their children's names. Both visitors walk every tensor in
/// the same fixed order. The *parameters* are the variables among them, what training
/// updates; the others are frozen (LoRA's base weights): no gradient, no optimizer state.
pub trait Module: Send + Sync {
    /// The output for `x`.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// Calls `f` with each tensor's name and tensor, frozen ones included.
    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor));

    /// Calls `f` with each tensor's name and tensor, mutably (to update or replace it), and
    /// stops at the first error.
    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()>;

    /// Calls `f` with each parameter (each variable) and its name.
    fn visit_parameters(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        self.visit(&mut |name, t| {
            if t.is_variable() {
                f(name, t);
            }
        });
    }

    /// Calls `f` with each parameter and its name, mutably, and stops at the first error.
    fn visit_parameters_mut(
        &mut self,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        self.visit_mut(&mut |name, t| match t.is_variable() {
            true => f(name, t),
            false => Ok(()),
        })
    }

    /// Calls `f` with each weight stored quantized (frozen, and not among the tensors),
    /// mutably, and stops at the first error; there are none by default.
    fn visit_quantized_mut(
        &mut self,
        f: &mut dyn FnMut(&mut Quantized) -> Result<()>,
    ) -> Result<()> {
        let _ = f;
        Ok(())
    }

    /// Switches training behaviour (dropout) on or off; on by default.
    fn set_training(&mut self, _training: bool) {}

    /// Every parameter with its name, in visiting order.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        self.visit_parameters(&mut |name, t| out.push((name.to_owned(), t.clone())));
        out
    }

    /// Every parameter (shared handles), in visiting order.
    fn parameters(&self) -> Vec<Tensor> {
        let mut out = Vec::new();
        self.visit_parameters(&mut |_, t| out.push(t.clone()));
        out
    }

    /// Number of scalar parameters.
    fn parameter_count(&self) -> usize {
        let mut count = 0;
        self.visit_parameters(&mut |_, t| count += t.numel());
        count
    }

    /// Number of scalars in weights stored quantized (frozen, and not among the tensors).
    fn quantized_count(&self) -> usize {
        0
    }

    /// Number of frozen scalars: in frozen tensors and in weights stored quantized.
    fn frozen_count(&self) -> usize {
        let mut count = 0;
        self.visit(&mut |_, t| count += usize::from(!t.is_variable()) * t.numel());
        count + self.quantized_count()
    }
}

/// `prefix.name`, or `name` alone under an empty prefix.
pub(crate) fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        return name.to_owned();
    }
    let mut joined = String::with_capacity(prefix.len() + 1 + name.len());
    joined.push_str(prefix);
    joined.push('.');
    joined.push_str(name);
    joined
}

/// Visits `child`'s parameters under `prefix` (`prefix.name`): how a module of one's own
/// implements [`Module::visit`] over its children.
pub fn visit_child(child: &dyn Module, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
    child.visit(&mut |name, t| f(&join(prefix, name), t));
}

/// Visits `child`'s parameters mutably under `prefix`: [`Module::visit_mut`] over a child.
pub fn visit_child_mut(
    child: &mut dyn Module,
    prefix: &str,
    f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
) -> Result<()> {
    child.visit_mut(&mut |name, t| f(&join(prefix, name), t))
}
