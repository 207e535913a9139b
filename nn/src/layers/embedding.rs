//! Embedding tables.

use headroom_autograd::Tensor;
use headroom_kernels::ops::quant::Quantized;

use crate::error::{Error, Result};
use crate::init::{Init, Initializer};
use crate::layers::linear_weight::Weight;
use crate::module::Module;

/// Rows of a `[count, dim]` table looked up by U32 ids of any shape: `ids.shape + [dim]`. The
/// table may be stored quantized (frozen: QLoRA's base), its rows dequantized as they are read.
#[derive(Debug, Clone)]
pub struct Embedding {
    /// `[count, dim]`.
    pub weight: Weight,
}

impl Embedding {
    /// A table of `count` rows of `dim`, drawn by `weight_init` (PyTorch uses `Normal(1.0)`,
    /// GPT-2 `Normal(0.02)`).
    pub fn new(
        init: &mut Initializer,
        count: usize,
        dim: usize,
        weight_init: Init,
    ) -> Result<Self> {
        if count == 0 || dim == 0 {
            return Err(Error::config(
                "embedding",
                format!("{count} rows of {dim}: both must be at least 1"),
            ));
        }
        Ok(Self {
            weight: init.weight([count, dim], weight_init)?,
        })
    }
}

impl Module for Embedding {
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        match &self.weight {
            Weight::Dense(table) => Ok(table.embedding(ids)?),
            // A frozen table: the rows are constants.
            Weight::Quantized(table) => {
                let rows = table.gather_rows(ids.array(), table.dtype())?;
                Ok(Tensor::new(rows))
            }
        }
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        if let Weight::Dense(table) = &self.weight {
            f("weight", table);
        }
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        match &mut self.weight {
            Weight::Dense(table) => f("weight", table),
            Weight::Quantized(_) => Ok(()),
        }
    }

    fn visit_quantized_mut(
        &mut self,
        f: &mut dyn FnMut(&mut Quantized) -> Result<()>,
    ) -> Result<()> {
        self.weight.visit_quantized_mut(f)
    }

    fn quantized_count(&self) -> usize {
        self.weight.quantized().map_or(0, Quantized::numel)
    }
}
