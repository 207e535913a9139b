//! What a LoRA run adapts, and how: rank, scaling, dropout and the layers it targets.

use headroom_kernels::ops::quant::QuantFormat;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The shape of low-rank adapters, as PEFT's `LoraConfig` names it: each adapted layer's
/// output gains `scale * B A dropout(x)`, with `A` of `[rank, in]` and `B` of `[out, rank]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoraConfig {
    /// The adapters' rank `r`.
    pub rank: usize,
    /// `lora_alpha`: the scale is `alpha / rank` (or `alpha / sqrt(rank)` with rsLoRA).
    pub alpha: f64,
    /// Dropout on each adapter's input, in `[0, 1)`.
    pub dropout: f64,
    /// rsLoRA (Kalajdzievski 2023): scale by `alpha / sqrt(rank)`, steadier at high ranks.
    pub rslora: bool,
    /// The layers adapted.
    pub targets: LoraTargets,
    /// How the blocks' linear layers are stored under the adapters: quantized (QLoRA), or
    /// `None` for tensors in the model's parameter dtype.
    pub base: Option<QuantizedBase>,
}

/// A frozen base stored quantized: QLoRA's NF4 (double-quantized, blocks of 64) or block-wise
/// int8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuantizedBase {
    /// 4-bit NormalFloat.
    Nf4,
    /// Block-wise absmax int8.
    Int8,
}

impl QuantizedBase {
    /// The storage format.
    pub fn format(self) -> QuantFormat {
        match self {
            QuantizedBase::Nf4 => QuantFormat::Nf4,
            QuantizedBase::Int8 => QuantFormat::Int8,
        }
    }
}

impl Default for LoraConfig {
    /// Rank 8, alpha 16, no dropout, every linear layer but the head (QLoRA's choice).
    fn default() -> Self {
        Self {
            rank: 8,
            alpha: 16.0,
            dropout: 0.0,
            rslora: false,
            targets: LoraTargets::default(),
            base: None,
        }
    }
}

/// Which layers get adapters: PEFT's module names (`q_proj`, `o_proj`, `gate_proj`, ...; GPT-2:
/// `c_attn`, `c_proj`, `c_fc`), each matching every module whose dotted path ends with it, or
/// `"all-linear"`: every linear layer of the blocks (not the vocabulary head).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LoraTargets {
    /// `"all-linear"`.
    All(AllLinear),
    /// Module names.
    Names(Vec<String>),
}

impl Default for LoraTargets {
    fn default() -> Self {
        Self::All(AllLinear::AllLinear)
    }
}

/// The one word `"all-linear"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllLinear {
    /// Every linear layer of the blocks.
    AllLinear,
}

impl LoraTargets {
    /// True when the module at the dotted `path` is a target.
    pub fn matches(&self, path: &str) -> bool {
        match self {
            Self::All(_) => true,
            Self::Names(names) => names.iter().any(|name| ends_with_module(path, name)),
        }
    }
}

/// `path` is `name` or ends with `.name` (PEFT's rule for a target given by name).
pub(crate) fn ends_with_module(path: &str, name: &str) -> bool {
    path == name
        || path
            .strip_suffix(name)
            .is_some_and(|head| head.ends_with('.'))
}

impl LoraConfig {
    /// The factor on each adapter's output.
    pub fn scale(&self) -> f64 {
        match self.rslora {
            true => self.alpha / (self.rank as f64).sqrt(),
            false => self.alpha / self.rank as f64,
        }
    }

    /// Every way the numbers fail to make adapters, each with its field.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.rank == 0 {
            problems.push(("rank", "0, where at least 1 is needed".to_owned()));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            problems.push((
                "alpha",
                format!("{}: a positive number is needed", self.alpha),
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            problems.push(("dropout", format!("{} is not in [0, 1)", self.dropout)));
        }
        if matches!(&self.targets, LoraTargets::Names(names) if names.is_empty()) {
            problems.push((
                "targets",
                "an empty list: name modules or write \"all-linear\"".to_owned(),
            ));
        }
        problems
    }

    /// Checks the numbers; the error names the first field that is wrong.
    pub fn validate(&self) -> Result<()> {
        match self.problems().into_iter().next() {
            Some((field, detail)) => Err(Error::config("lora", format!("{field}: {detail}"))),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_whole_trailing_segments_as_peft_does() {
        let targets = LoraTargets::Names(vec!["q_proj".into(), "c_proj".into()]);
        assert!(targets.matches("model.layers.0.self_attn.q_proj"));
        assert!(targets.matches("transformer.h.1.mlp.c_proj"));
        assert!(!targets.matches("model.layers.0.self_attn.qq_proj"));
        assert!(!targets.matches("model.layers.0.self_attn.k_proj"));
        assert!(LoraTargets::default().matches("anything"));
    }

    #[test]
    fn scale_is_alpha_over_rank_or_its_root() {
        let mut config = LoraConfig {
            rank: 16,
            alpha: 32.0,
            ..LoraConfig::default()
        };
        assert_eq!(config.scale(), 2.0);
        config.rslora = true;
        assert_eq!(config.scale(), 8.0);
    }

    #[test]
    fn bad_numbers_are_named() {
        let config = LoraConfig {
            rank: 0,
            dropout: 1.0,
            targets: LoraTargets::Names(vec![]),
            ..LoraConfig::default()
        };
        let fields: Vec<_> = config.problems().into_iter().map(|(f, _)| f).collect();
        assert_eq!(fields, ["rank", "dropout", "targets"]);
    }
}
