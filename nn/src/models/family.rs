//! The families Headroom builds, and what the decoder asks each: its shape's rules and its
//! blocks. A new family is a folder beside `gpt2/`, `llama/` and `gemma3/` and a variant here.

use headroom_kernels::Device;

use crate::error::Result;
use crate::init::Initializer;
use crate::layers::activation::DropoutCounter;
use crate::models::assembly::{Assembled, BlockShape};
use crate::models::gemma3::Gemma3Options;
use crate::models::llama::LlamaOptions;
use crate::models::{gemma3, gpt2, llama};

/// Which family's parts a [`Gpt`](crate::Gpt) is built of.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Family {
    /// GPT-2: learned positions, LayerNorm, a GELU MLP four times the width, one head per
    /// `width / heads` features, biases on every projection.
    #[default]
    Gpt2,
    /// Llama and the families built like it (Qwen2, Qwen3, SmolLM2, Mistral): rotary positions,
    /// RMSNorm, a SwiGLU MLP and grouped key/value heads, with the options below.
    Llama(LlamaOptions),
    /// Gemma 3: Llama's parts with a GeGLU MLP, RMSNorms that scale by one plus their weight
    /// before and after each sublayer and on queries and keys, scaled embeddings, and
    /// sliding-window attention on most layers.
    Gemma3(Gemma3Options),
}

impl Family {
    /// Its name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Family::Gpt2 => "GPT-2",
            Family::Llama(_) => "the Llama family",
            Family::Gemma3(_) => "Gemma 3",
        }
    }

    /// Every way the family's options fail to make a model of `width` features in `heads`
    /// heads, each with the field it is about.
    pub(crate) fn problems(&self, width: usize, heads: usize) -> Vec<(&'static str, String)> {
        let none = || vec![("heads", "0, where at least 1 is needed".to_owned())];
        match self {
            Family::Gpt2 => gpt2::problems(width, heads),
            Family::Llama(_) | Family::Gemma3(_) if heads == 0 => none(),
            Family::Llama(options) => options.problems(heads),
            Family::Gemma3(options) => options.problems(heads),
        }
    }

    /// Features per attention head.
    pub fn head_dim(&self, width: usize, heads: usize) -> usize {
        match self {
            Family::Gpt2 => width.checked_div(heads).unwrap_or(0),
            Family::Llama(options) => options.head_dim,
            Family::Gemma3(options) => options.head_dim,
        }
    }

    /// Key/value heads of a model of `heads` query heads.
    pub fn kv_heads(&self, heads: usize) -> usize {
        match self {
            Family::Gpt2 => heads,
            Family::Llama(options) => options.kv_heads,
            Family::Gemma3(options) => options.kv_heads,
        }
    }

    /// Whether positions are a learned table added to the token embeddings (GPT-2), rather
    /// than turns of the queries and keys.
    pub(crate) fn learned_positions(&self) -> bool {
        matches!(self, Family::Gpt2)
    }

    /// What the token embeddings are multiplied by before the first block, if anything.
    pub(crate) fn embedding_scale(&self, width: usize) -> Option<f64> {
        match self {
            Family::Gemma3(_) => Some((width as f64).sqrt()),
            Family::Gpt2 | Family::Llama(_) => None,
        }
    }

    /// The blocks of `shape` (drawn on `host` when given) and the final norm.
    pub(crate) fn assemble(
        &self,
        init: &mut Initializer,
        shape: &BlockShape,
        counter: &DropoutCounter,
        host: Option<&Device>,
    ) -> Result<Assembled> {
        match self {
            Family::Gpt2 => gpt2::blocks::assemble(init, shape, counter, host),
            Family::Llama(options) => llama::blocks::assemble(init, shape, options, counter, host),
            Family::Gemma3(options) => {
                gemma3::blocks::assemble(init, shape, options, counter, host)
            }
        }
    }

    /// The published names of the tensors that fill the parameter `name`, stacked along the
    /// first axis, for a family whose checkpoints hold `[out, in]` weights (all but GPT-2);
    /// none when the family has no such tensor.
    pub(crate) fn hf_names(&self, name: &str) -> Option<Vec<String>> {
        match self {
            Family::Gpt2 => None,
            Family::Llama(_) => llama::names::hf_names(name),
            Family::Gemma3(_) => gemma3::names::hf_names(name),
        }
    }
}

impl Family {
    /// The transformers module paths of the model's linear layer `layer` (`blocks.0.attn.qkv`),
    /// in output order: three for a fused `qkv` of a family that keeps them apart, one
    /// otherwise; none for a layer the family's checkpoints do not hold.
    pub(crate) fn module_paths(&self, layer: &str) -> Option<Vec<String>> {
        let weight = format!("{layer}.weight");
        let names = match self {
            Family::Gpt2 => {
                let (name, _) = gpt2::names::hf_name(&weight)?;
                vec![format!("{}{name}", gpt2::names::PREFIX)]
            }
            _ => self.hf_names(&weight)?,
        };
        let paths = names
            .iter()
            .map(|n| n.strip_suffix(".weight").map(str::to_owned));
        paths.collect()
    }
}
