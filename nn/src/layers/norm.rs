//! A decoder's normalization: LayerNorm (GPT-2) or RMSNorm (the Llama family).

use headroom_autograd::Tensor;

use crate::error::Result;
use crate::layers::block_mlp::each_of;
use crate::layers::layer_norm::LayerNorm;
use crate::layers::linear::Linear;
use crate::layers::rms_norm::RmsNorm;
use crate::module::Module;

/// One of the two normalizations a decoder's blocks and final norm use. Its parameters are
/// those of the norm it holds (`weight` and `bias`, or `weight` alone).
#[derive(Debug, Clone)]
pub enum Norm {
    /// Zero mean and unit variance, then a scale and a shift.
    Layer(LayerNorm),
    /// Unit root mean square, then a scale.
    Rms(RmsNorm),
}

impl Norm {
    /// Its scale (`weight`).
    pub fn weight(&self) -> &Tensor {
        match self {
            Norm::Layer(norm) => &norm.weight,
            Norm::Rms(norm) => &norm.weight,
        }
    }

    /// What is added to the variance or the mean square.
    pub fn eps(&self) -> f64 {
        match self {
            Norm::Layer(norm) => norm.eps,
            Norm::Rms(norm) => norm.eps,
        }
    }

    /// Sets what is added to the variance or the mean square.
    pub fn set_eps(&mut self, eps: f64) {
        match self {
            Norm::Layer(norm) => norm.eps = eps,
            Norm::Rms(norm) => norm.eps = eps,
        }
    }

    /// Each of `layers` applied to `self(x)`, the norm's output computed again in the
    /// backward pass instead of kept ([`Tensor::layer_norm_linear`],
    /// [`Tensor::rms_norm_linears`]). An RMSNorm's op takes the adapters' first products too
    /// (where they read the layer's input itself); a LayerNorm feeding several layers, or an
    /// adapted one, keeps its output.
    pub fn linears_recomputed(&self, x: &Tensor, layers: &[&Linear]) -> Result<Vec<Tensor>> {
        let products: Option<Vec<_>> = layers.iter().map(|layer| layer.products()).collect();
        let plain: Option<Vec<_>> = layers.iter().map(|layer| layer.plain_weight()).collect();
        match (self, layers, products, plain.as_deref()) {
            (Norm::Layer(n), [layer], _, Some([weight])) => Ok(vec![x.layer_norm_linear(
                (&n.weight, &n.bias, n.eps),
                weight,
                layer.bias.as_ref(),
            )?]),
            (Norm::Rms(n), _, Some(products), _) => {
                let all: Vec<_> = products.iter().flatten().copied().collect();
                let scale = n.scale()?;
                let mut outputs = x.rms_norm_linears((&scale, n.eps), &all)?.into_iter();
                layers
                    .iter()
                    .zip(&products)
                    .map(|(layer, own)| {
                        layer.from_products(outputs.by_ref().take(own.len()).collect())
                    })
                    .collect()
            }
            _ => each_of(&self.forward(x)?.for_matmul()?, layers),
        }
    }
}

impl Module for Norm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Norm::Layer(norm) => norm.forward(x),
            Norm::Rms(norm) => norm.forward(x),
        }
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        match self {
            Norm::Layer(norm) => norm.visit(f),
            Norm::Rms(norm) => norm.visit(f),
        }
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        match self {
            Norm::Layer(norm) => norm.visit_mut(f),
            Norm::Rms(norm) => norm.visit_mut(f),
        }
    }
}
