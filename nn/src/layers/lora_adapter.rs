//! One layer's adapters: `y = base(x) + scale * B (A dropout(x))`, over the whole output or
//! over slices of a fused layer's output (the query, key and value projections of `qkv`).

use headroom_autograd::Tensor;

use crate::error::{Error, Result};
use crate::layers::activation::Dropout;
use crate::module::Module;

/// The adapter of one slice of a layer's outputs.
#[derive(Debug, Clone)]
pub struct LoraPart {
    /// The PEFT module it stands for (`model.layers.0.self_attn.q_proj`).
    pub module: String,
    /// Its name under the layer: the module's last segment for a slice of a fused layer
    /// (`q_proj`), empty when it covers the whole layer.
    pub name: String,
    /// The first output row it adds to.
    pub start: usize,
    /// `A`, `[rank, in]`: drawn as PEFT draws it (Kaiming-uniform, bound `1 / sqrt(in)`).
    pub a: Tensor,
    /// `B`, `[rows, rank]`: zeros at first, so that the adapted layer starts as the base.
    pub b: Tensor,
}

impl LoraPart {
    /// Output rows it covers.
    pub fn rows(&self) -> usize {
        self.b.dims()[0]
    }

    /// The prefix of its tensors' names under the layer (`q_proj.` or nothing).
    fn prefix(&self) -> String {
        match self.name.is_empty() {
            true => String::new(),
            false => format!("{}.", self.name),
        }
    }
}

/// A layer's adapters: its parts in output order, not overlapping; rows between them get
/// nothing.
#[derive(Debug, Clone)]
pub struct LoraAdapter {
    /// Invariant: sorted by `start`, each within `outputs`, none overlapping.
    pub(crate) parts: Vec<LoraPart>,
    /// The layer's output features.
    pub(crate) outputs: usize,
    /// The factor on each part's output.
    pub(crate) scale: f64,
    pub(crate) dropout: Dropout,
}

impl LoraAdapter {
    /// Adapters of `parts` on a layer of `outputs` features, their outputs scaled by `scale`,
    /// their input through `dropout`.
    pub fn new(
        mut parts: Vec<LoraPart>,
        outputs: usize,
        scale: f64,
        dropout: Dropout,
    ) -> Result<Self> {
        parts.sort_by_key(|part| part.start);
        let mut end = 0;
        for part in &parts {
            let (a, b) = (part.a.dims(), part.b.dims());
            if a.len() != 2 || b.len() != 2 || a[0] != b[1] || part.start < end {
                return Err(Error::config(
                    "lora adapter",
                    format!(
                        "`{}`: A {} and B {} from row {} are not a rank-r pair after row {end}",
                        part.module,
                        part.a.shape(),
                        part.b.shape(),
                        part.start
                    ),
                ));
            }
            end = part.start + part.rows();
        }
        if end > outputs {
            return Err(Error::config(
                "lora adapter",
                format!("its parts reach row {end} of a layer of {outputs} outputs"),
            ));
        }
        Ok(Self {
            parts,
            outputs,
            scale,
            dropout,
        })
    }

    /// The parts, in output order.
    pub fn parts(&self) -> &[LoraPart] {
        &self.parts
    }

    /// The parts, mutably (to load trained values).
    pub(crate) fn parts_mut(&mut self) -> &mut [LoraPart] {
        &mut self.parts
    }

    /// The factor on each part's output.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// True when the adapters read the layer's input itself (no dropout), so that their first
    /// products can join the base's (an op that computes its input again for them).
    pub fn reads_input(&self) -> bool {
        self.dropout.p() == 0.0
    }

    /// The `A` matrices, one per part.
    pub fn down_weights(&self) -> Vec<&Tensor> {
        self.parts.iter().map(|part| &part.a).collect()
    }

    /// `A dropout(x)` for each part.
    pub fn down(&self, x: &Tensor) -> Result<Vec<Tensor>> {
        let x = self.dropout.forward(x)?;
        self.parts
            .iter()
            .map(|part| Ok(x.linear(&part.a, None)?))
            .collect()
    }

    /// `base + scale * B down` over each part's rows, from `down` (one per part, as
    /// [`down`](Self::down) gives them).
    pub fn add_to(&self, base: &Tensor, down: Vec<Tensor>) -> Result<Tensor> {
        if down.len() != self.parts.len() {
            return Err(Error::config(
                "lora adapter",
                format!(
                    "{} down products for {} parts",
                    down.len(),
                    self.parts.len()
                ),
            ));
        }
        let mut pieces = Vec::with_capacity(2 * self.parts.len() + 1);
        let mut end = 0;
        for (part, h) in self.parts.iter().zip(down) {
            if part.start > end {
                pieces.push(zeros_like_rows(base, part.start - end)?);
            }
            pieces.push(h.scale(self.scale)?.linear(&part.b, None)?);
            end = part.start + part.rows();
        }
        if end < self.outputs {
            pieces.push(zeros_like_rows(base, self.outputs - end)?);
        }
        let delta = match pieces.as_slice() {
            [whole] => whole.clone(),
            _ => {
                let axis = base.dims().len() - 1;
                Tensor::concat(&pieces.iter().collect::<Vec<_>>(), axis)?
            }
        };
        Ok(base.add(&delta)?)
    }

    /// Calls `f` with each part's `A` and `B` (`lora_A.weight`, `lora_B.weight`, under the
    /// part's name for a slice).
    pub(crate) fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        for part in &self.parts {
            let prefix = part.prefix();
            f(&format!("{prefix}lora_A.weight"), &part.a);
            f(&format!("{prefix}lora_B.weight"), &part.b);
        }
    }

    /// The same, mutably.
    pub(crate) fn visit_mut(
        &mut self,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        for part in &mut self.parts {
            let prefix = part.prefix();
            f(&format!("{prefix}lora_A.weight"), &mut part.a)?;
            f(&format!("{prefix}lora_B.weight"), &mut part.b)?;
        }
        Ok(())
    }

    pub(crate) fn set_training(&mut self, training: bool) {
        self.dropout.set_training(training);
    }
}

/// Zeros shaped as `base` but for `rows` features on its last axis, in its dtype: the rows of
/// a fused layer that no part adapts.
fn zeros_like_rows(base: &Tensor, rows: usize) -> Result<Tensor> {
    let mut dims = base.dims().to_vec();
    if let Some(last) = dims.last_mut() {
        *last = rows;
    }
    Ok(Tensor::full(base.device(), dims, base.dtype(), 0.0)?)
}
