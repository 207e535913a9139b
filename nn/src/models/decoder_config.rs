//! A decoder's shape and family: what every family shares, checked in one place.

use crate::error::{Error, Result};
use crate::models::assembly::BlockShape;
use crate::models::family::Family;

/// A decoder's shape and family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GptConfig {
    /// Number of distinct tokens.
    pub vocab: usize,
    /// Longest sequence (positions).
    pub context: usize,
    /// Features per position.
    pub width: usize,
    /// Attention (query) heads; for GPT-2 they divide the width.
    pub heads: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Dropout on embeddings, attention weights and residual branches.
    pub dropout: f64,
    /// The head shares the token embedding's weight (GPT-2 ties them): one parameter,
    /// `tok_emb.weight`, with gradients from both uses, and no `head.weight`.
    pub tie_embeddings: bool,
    /// The parts that vary from family to family.
    pub family: Family,
}

impl GptConfig {
    /// Every way the numbers fail to make a model, each with the field it is about: the rules
    /// of a GPT's shape, in one place for every caller (a trainer lists them with the rest of
    /// its configuration's problems).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        for (field, value) in [
            ("vocab", self.vocab),
            ("context", self.context),
            ("width", self.width),
            ("layers", self.layers),
        ] {
            if value == 0 {
                problems.push((field, "0, where at least 1 is needed".to_owned()));
            }
        }
        problems.extend(self.family.problems(self.width, self.heads));
        if !(0.0..1.0).contains(&self.dropout) {
            problems.push(("dropout", format!("{} is not in [0, 1)", self.dropout)));
        }
        problems
    }

    /// Checks that the numbers make a model; the error names the first field that does not.
    pub fn validate(&self) -> Result<()> {
        match self.problems().into_iter().next() {
            Some((field, detail)) => Err(Error::config("gpt", format!("{field}: {detail}"))),
            None => Ok(()),
        }
    }

    /// Features per attention head.
    pub fn head_dim(&self) -> usize {
        self.family.head_dim(self.width, self.heads)
    }

    /// The shape its family's blocks take.
    pub(crate) fn block_shape(&self) -> BlockShape {
        BlockShape {
            width: self.width,
            heads: self.heads,
            layers: self.layers,
            dropout: self.dropout,
        }
    }

    /// Key/value heads: the heads for GPT-2, fewer when grouped.
    pub fn kv_heads(&self) -> usize {
        self.family.kv_heads(self.heads)
    }
}
