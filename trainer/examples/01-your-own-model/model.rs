//! A model of one's own for the trainer: a residual MLP over feature vectors (neither of the
//! built-in models), its factory, and a toy dataset it learns. Shared by the example and the
//! trainer's tests of user models.

use headroom_autograd::Tensor;
use headroom_kernels::{DType, Device};
use headroom_nn::loss::cross_entropy;
use headroom_nn::{
    DropoutCounter, Initializer, Linear, Module, recomputed, visit_child, visit_child_mut,
};
use headroom_trainer::config::Recompute;
use headroom_trainer::data::{DataShape, DeviceBatch, FeatureShape, FeatureTable, IGNORE};
use headroom_trainer::model::{Knobs, ModelFactory, ModelSettings, TrainableModel};

/// A residual block: `h + out(gelu(inner(h)))`.
#[derive(Clone)]
struct ResidualBlock {
    inner: Linear,
    out: Linear,
}

impl Module for ResidualBlock {
    fn forward(&self, h: &Tensor) -> headroom_nn::Result<Tensor> {
        let branch = self.out.forward(&self.inner.forward(h)?.gelu()?)?;
        Ok(h.add(&branch)?)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        visit_child(&self.inner, "inner", f);
        visit_child(&self.out, "out", f);
    }

    fn visit_mut(
        &mut self,
        f: &mut dyn FnMut(&str, &mut Tensor) -> headroom_nn::Result<()>,
    ) -> headroom_nn::Result<()> {
        visit_child_mut(&mut self.inner, "inner", f)?;
        visit_child_mut(&mut self.out, "out", f)
    }
}

/// A residual MLP: `x -> input`, then residual blocks, then a linear head. With `recompute`,
/// each block keeps only its input and runs again in the backward pass (the memory technique
/// its factory offers the trainer's policy).
pub struct ResidualMlp {
    input: Linear,
    blocks: Vec<ResidualBlock>,
    head: Linear,
    recompute: bool,
    counter: DropoutCounter,
}

impl Module for ResidualMlp {
    fn forward(&self, x: &Tensor) -> headroom_nn::Result<Tensor> {
        let mut h = self.input.forward(x)?;
        for block in &self.blocks {
            h = match self.recompute {
                true => recomputed(block, &self.counter, &h)?,
                false => block.forward(&h)?,
            };
        }
        self.head.forward(&h)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        visit_child(&self.input, "input", f);
        for (i, block) in self.blocks.iter().enumerate() {
            visit_child(block, &format!("blocks.{i}"), f);
        }
        visit_child(&self.head, "head", f);
    }

    fn visit_mut(
        &mut self,
        f: &mut dyn FnMut(&str, &mut Tensor) -> headroom_nn::Result<()>,
    ) -> headroom_nn::Result<()> {
        visit_child_mut(&mut self.input, "input", f)?;
        for (i, block) in self.blocks.iter_mut().enumerate() {
            visit_child_mut(block, &format!("blocks.{i}"), f)?;
        }
        visit_child_mut(&mut self.head, "head", f)
    }
}

impl TrainableModel for ResidualMlp {
    fn module(&self) -> &dyn Module {
        self
    }

    fn module_mut(&mut self) -> &mut dyn Module {
        self
    }

    fn loss(&self, batch: &DeviceBatch) -> headroom_trainer::Result<Tensor> {
        let logits = self.forward(batch.inputs()?)?;
        Ok(cross_entropy(&logits, batch.targets()?, Some(IGNORE))?)
    }

    fn logits(&self, inputs: &Tensor) -> headroom_trainer::Result<Tensor> {
        Ok(self.forward(inputs)?)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// Builds a [`ResidualMlp`] of `width` and `depth` blocks for the data's features and classes.
pub struct ResidualMlpFactory {
    /// Features between the blocks.
    pub width: usize,
    /// Residual blocks.
    pub depth: usize,
    /// Offer the policy to run the blocks again in the backward pass.
    pub offer_recompute: bool,
}

impl ModelFactory for ResidualMlpFactory {
    fn build(
        &self,
        device: &Device,
        shape: &DataShape,
        settings: &ModelSettings,
    ) -> headroom_trainer::Result<Box<dyn TrainableModel>> {
        let Some(FeatureShape { dim, classes }) = shape.as_features() else {
            return Err(headroom_trainer::Error::Config {
                problems: vec![format!("a residual MLP reads feature vectors, not {shape}")],
            });
        };
        let init = &mut Initializer::new(device, DType::F32, settings.seed);
        let w = self.width;
        let blocks = (0..self.depth)
            .map(|_| {
                Ok(ResidualBlock {
                    inner: Linear::new(init, w, 4 * w, true)?,
                    out: Linear::new(init, 4 * w, w, true)?,
                })
            })
            .collect::<headroom_nn::Result<Vec<_>>>()?;
        Ok(Box::new(ResidualMlp {
            input: Linear::new(init, dim, w, true)?,
            blocks,
            head: Linear::new(init, w, classes, true)?,
            recompute: settings.recompute == Recompute::Blocks,
            counter: DropoutCounter::default(),
        }))
    }

    fn knobs(&self, _shape: &DataShape) -> Knobs {
        Knobs {
            block_recompute: self.offer_recompute,
            ..Knobs::default()
        }
    }
}

/// Points of 8 features, labelled by which of four quadrants their first two lie in.
pub fn quadrants(count: usize, seed: u64) -> FeatureTable {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut draw = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0
    };
    let mut values = Vec::new();
    let mut labels = Vec::new();
    for _ in 0..count {
        let point: Vec<f32> = (0..8).map(|_| draw()).collect();
        labels.push(u32::from(point[0] > 0.0) * 2 + u32::from(point[1] > 0.0));
        values.extend(point);
    }
    FeatureTable {
        dim: 8,
        classes: 4,
        values,
        labels,
    }
}
