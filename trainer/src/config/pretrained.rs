//! `model.init_from`: a Hugging Face model directory (GPT-2, the Llama family, Gemma 3) or a GGUF
//! file (the Llama family) fixes the model's shape. Its `config.json` (or GGUF keys) wins over a
//! preset; a shape that the configuration file or
//! a flag sets otherwise is an error, but for a shorter context (which, for GPT-2, crops the
//! position table, as nanoGPT's `crop_block_size`).

use std::path::Path;

use headroom_nn::hf::{PeftAdapter, Pretrained};
use headroom_nn::lora::LoraConfig;

use super::{DataKind, ModelConfig, ModelKind, TrainConfig};
use crate::error::{Error, Result};

/// The `[model]` fields a pretrained model's configuration fixes.
const SHAPE_FIELDS: [&str; 17] = [
    "layers",
    "width",
    "heads",
    "tie_embeddings",
    "family",
    "kv_heads",
    "head_dim",
    "mlp_width",
    "rope_theta",
    "rope_scaling",
    "max_positions",
    "qkv_bias",
    "qk_norm",
    "rope_local_theta",
    "query_pre_attn_scalar",
    "sliding_window",
    "sliding_window_pattern",
];

impl ModelConfig {
    /// Takes the shape of the pretrained model `init_from` names: each field still at its value
    /// in `base` (the defaults, or the preset's) and not among the `written` keys of the
    /// configuration file's `[model]` gets the pretrained model's, and each field set otherwise
    /// must equal it. Without `init_from`, nothing changes.
    pub fn adopt_pretrained(&mut self, base: &ModelConfig, written: &[String]) -> Result<()> {
        let Some(dir) = self.init_from.clone() else {
            return Ok(());
        };
        self.check_init_from()?;
        // A PEFT adapter directory trains its adapters on (as its configuration shapes them,
        // unless `[model.lora]` does beyond the base's storage) over its base.
        let storage = self.lora.as_ref().and_then(|lora| lora.base);
        let shaped = self.lora.as_ref().is_some_and(|lora| {
            let unquantized = LoraConfig {
                base: None,
                ..lora.clone()
            };
            unquantized != LoraConfig::default()
        });
        if PeftAdapter::is_adapter_dir(&dir) && !shaped {
            let adapter = PeftAdapter::read(&dir)?.lora;
            self.lora = Some(LoraConfig {
                base: storage,
                ..adapter
            });
        }
        let pretrained = Pretrained::read(&dir)?;
        let theirs = pretrained.gpt_config(self.dropout);
        let mut adopted = self.clone();
        adopted.take_shape(&theirs);
        let table = |config: &ModelConfig| toml::Table::try_from(config).unwrap_or_default();
        let (mut ours, base, adopted) = (table(self), table(base), table(&adopted));
        for field in SHAPE_FIELDS {
            if ours.get(field) == base.get(field) && !written.iter().any(|w| w == field) {
                match adopted.get(field) {
                    Some(value) => ours.insert(field.to_owned(), value.clone()),
                    None => ours.remove(field),
                };
            }
        }
        let kept = (self.vocab, self.context, self.norm_eps);
        *self = ours
            .try_into()
            .map_err(|err: toml::de::Error| Error::Config {
                problems: vec![format!("model: {err}")],
            })?;
        (self.vocab, self.context, self.norm_eps) = kept;
        self.vocab = self.vocab.or(Some(theirs.vocab));
        self.norm_eps = self.norm_eps.or(Some(pretrained.norm_eps()));
        if let Pretrained::Gpt2(_) = pretrained {
            // GPT-2's positions are a table: its rows are the window unless one is set.
            self.context = self.context.or(Some(theirs.context));
        }
        self.preset = None;
        match self.pretrained_problems(&dir, &pretrained).as_slice() {
            [] => Ok(()),
            problems => Err(Error::Config {
                problems: problems.to_vec(),
            }),
        }
    }

    /// How the model's shape departs from the pretrained model's in `dir`, and what is wrong
    /// with its weight files, read from their headers (none when it fits, nothing is
    /// pretrained or the directory is missing, which
    /// [`missing_init_from`](Self::missing_init_from) names); an unreadable directory is one
    /// problem.
    pub fn pretrained_mismatches(&self) -> Vec<String> {
        let Some(dir) = self
            .init_from
            .as_ref()
            .filter(|_| self.missing_init_from().is_none())
        else {
            return Vec::new();
        };
        match Pretrained::read(dir) {
            Ok(pretrained) => {
                let mut problems = self.pretrained_problems(dir, &pretrained);
                // The weight files too, from their headers: a truncated or mismatched file is
                // refused before anything is planned or loaded.
                if let Err(err) = headroom_nn::hf::check_weights(dir) {
                    problems.push(format!("model.init_from: {err}"));
                }
                problems
            }
            Err(err) => vec![format!("model.init_from: {err}")],
        }
    }

    fn pretrained_problems(&self, dir: &Path, pretrained: &Pretrained) -> Vec<String> {
        let source = pretrained.source(dir);
        let mut problems = Vec::new();
        if self.kind != ModelKind::Gpt {
            problems
                .push("model.init_from: pretrained weights are a GPT's; model.kind is mlp".into());
        }
        let theirs = pretrained.gpt_config(self.dropout);
        let ours = self.gpt_config(self.vocab.unwrap_or(theirs.vocab), 1);
        let ours = headroom_nn::GptConfig {
            context: theirs.context,
            ..ours
        };
        let mut differ = |field: &str, ours: String, theirs: String| {
            problems.push(format!(
                "model.{field} = {ours} conflicts with {}, whose {} is {theirs} (leave it unset \
                 to take the pretrained model's)",
                source.display(),
                pretrained.field(field)
            ));
        };
        for (field, a, b) in [
            ("layers", ours.layers, theirs.layers),
            ("width", ours.width, theirs.width),
            ("heads", ours.heads, theirs.heads),
            ("vocab", ours.vocab, theirs.vocab),
        ] {
            if a != b {
                differ(field, a.to_string(), b.to_string());
            }
        }
        if ours.tie_embeddings != theirs.tie_embeddings {
            let (a, b) = (ours.tie_embeddings, theirs.tie_embeddings);
            differ("tie_embeddings", a.to_string(), b.to_string());
        }
        if let Some(eps) = self.norm_eps.filter(|&e| e != pretrained.norm_eps()) {
            differ(
                "norm_eps",
                eps.to_string(),
                pretrained.norm_eps().to_string(),
            );
        }
        let same_family = match (&ours.family, &theirs.family) {
            (headroom_nn::Family::Llama(a), headroom_nn::Family::Llama(b)) => {
                headroom_nn::LlamaOptions {
                    norm_eps: b.norm_eps,
                    ..*a
                } == *b
            }
            (headroom_nn::Family::Gemma3(a), headroom_nn::Family::Gemma3(b)) => {
                headroom_nn::Gemma3Options {
                    norm_eps: b.norm_eps,
                    ..*a
                } == *b
            }
            (a, b) => a == b,
        };
        if !same_family {
            differ(
                "family",
                format!("{:?}", ours.family),
                format!("{:?}", theirs.family),
            );
        }
        if let Some(m) = self
            .max_positions
            .filter(|_| !matches!(pretrained, Pretrained::Gpt2(_)))
            && m != theirs.context
        {
            differ("max_positions", m.to_string(), theirs.context.to_string());
        }
        if let Some(context) = self.context.filter(|&c| c > theirs.context) {
            problems.push(format!(
                "model.context = {context} is longer than {}'s {} of {}: the pretrained model \
                 was not made for positions past it",
                source.display(),
                pretrained.field("context"),
                theirs.context
            ));
        }
        problems
    }
}

impl TrainConfig {
    /// Token shards tokenized by another tokenizer than the pretrained model's: the problem,
    /// naming both (none when either is absent, as the data or the model then says).
    pub fn pretrained_tokenizer_mismatch(&self) -> Option<String> {
        let init_from = self.model.init_from.as_ref()?;
        let pretrained = match headroom_nn::gguf::is_gguf(init_from) {
            true => init_from.clone(),
            false => init_from.join(crate::data::shards::TOKENIZER),
        };
        let data = self
            .data
            .path
            .as_ref()
            .filter(|_| self.data.kind == DataKind::TokenShards)?;
        let manifest = crate::data::shards::Manifest::read(data).ok()?;
        let problem = manifest.tokenizer_mismatch(&pretrained, "the pretrained model's")?;
        Some(format!("data.path: {} was {problem}", data.display()))
    }
}
