//! A block bound to a packed batch's document starts, run as a module: what a recomputed
//! segment keeps, so that its recomputation in the backward pass sees the same documents.

use headroom_autograd::Tensor;
use headroom_kernels::Array;
use headroom_kernels::ops::quant::Quantized;

use crate::error::Result;
use crate::layers::block::Block;
use crate::module::Module;

/// A block whose forward pass attends within the documents of `starts` (`[B, T]`, U32), or as
/// the plain block where there are none ([`Block::forward_in`]). Its tensors are the block's,
/// named as the block names them.
#[derive(Debug, Clone)]
pub struct BlockInDocuments {
    /// The block.
    pub block: Block,
    /// The batch's document starts; none: one sequence per row.
    pub starts: Option<Array>,
}

impl Module for BlockInDocuments {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.block.forward_in(x, self.starts.as_ref())
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        self.block.visit(f);
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        self.block.visit_mut(f)
    }

    fn visit_quantized_mut(
        &mut self,
        f: &mut dyn FnMut(&mut Quantized) -> Result<()>,
    ) -> Result<()> {
        self.block.visit_quantized_mut(f)
    }

    fn set_training(&mut self, training: bool) {
        self.block.set_training(training);
    }

    fn quantized_count(&self) -> usize {
        self.block.quantized_count()
    }
}
