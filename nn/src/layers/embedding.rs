//! Embedding tables.

use headroom_autograd::Tensor;

use crate::error::{Error, Result};
use crate::init::{Init, Initializer};
use crate::module::Module;

/// Rows of a `[count, dim]` table looked up by U32 ids of any shape: `ids.shape + [dim]`.
#[derive(Debug, Clone)]
pub struct Embedding {
    /// `[count, dim]`.
    pub weight: Tensor,
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
            weight: init.param([count, dim], weight_init)?,
        })
    }
}

impl Module for Embedding {
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        Ok(self.weight.embedding(ids)?)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        f("weight", &self.weight);
    }

    fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
        f("weight", &mut self.weight)
    }
}
