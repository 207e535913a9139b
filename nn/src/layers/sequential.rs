//! Modules applied one after the other, and the MLP builder.

use headroom_autograd::Tensor;

use crate::error::{Error, Result};
use crate::init::Initializer;
use crate::layers::activation::Activation;
use crate::layers::linear::Linear;
use crate::module::{Module, visit_child, visit_child_mut};

/// Modules applied in order; parameters are named by position (`0.weight`, `2.bias`), as in
/// PyTorch's `nn.Sequential`.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
}

impl Sequential {
    /// No layers yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a layer.
    pub fn push(mut self, layer: impl Module + 'static) -> Self {
        self.layers.push(Box::new(layer));
        self
    }

    /// Number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// True with no layer.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

impl Module for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for layer in &self.layers {
            h = layer.forward(&h)?;
        }
        Ok(h)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        for (i, layer) in self.layers.iter().enumerate() {
            visit_child(layer.as_ref(), &i.to_string(), f);
        }
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        for (i, layer) in self.layers.iter_mut().enumerate() {
            visit_child_mut(layer.as_mut(), &i.to_string(), f)?;
        }
        Ok(())
    }

    fn set_training(&mut self, training: bool) {
        for layer in &mut self.layers {
            layer.set_training(training);
        }
    }
}

/// An MLP: linear layers through `sizes` (`[784, 1024, 1024, 10]` is three layers) with
/// `activation` between them, none after the last. Parameters are named `0.weight`, `0.bias`,
/// `2.weight`, ... as the same `nn.Sequential` in PyTorch.
///
/// ```
/// use headroom_nn::{Activation, Initializer, Module, mlp};
/// use headroom_kernels::{Device, DeviceConfig, DType};
/// let cpu = Device::cpu(DeviceConfig::new(16 << 20))?;
/// let model = mlp(&mut Initializer::new(&cpu, DType::F32, 0), &[4, 8, 3], Activation::Relu)?;
/// let names: Vec<String> = model.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
/// # Ok::<(), headroom_nn::Error>(())
/// ```
pub fn mlp(init: &mut Initializer, sizes: &[usize], activation: Activation) -> Result<Sequential> {
    if sizes.len() < 2 {
        return Err(Error::config(
            "mlp",
            format!("sizes {sizes:?}: at least an input and an output size"),
        ));
    }
    let mut model = Sequential::new();
    for (k, io) in sizes.windows(2).enumerate() {
        if k > 0 {
            model = model.push(activation);
        }
        model = model.push(Linear::new(init, io[0], io[1], true)?);
    }
    Ok(model)
}
