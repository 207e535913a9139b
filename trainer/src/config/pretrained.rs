//! `model.init_from`: a Hugging Face GPT-2 directory fixes the model's shape. Its
//! `config.json` wins over a preset; a shape that the configuration file or a flag sets
//! otherwise is an error, but for a shorter context, which crops the position table (as
//! nanoGPT's `crop_block_size`).

use std::path::Path;

use headroom_nn::hf::Gpt2Config;

use super::{DataKind, ModelConfig, ModelKind, TrainConfig};
use crate::error::{Error, Result};

impl ModelConfig {
    /// Takes the shape of the pretrained model `init_from` names: each field still at its value
    /// in `base` (the defaults, or the preset's) and not among the `written` keys of the
    /// configuration file's `[model]` gets the pretrained model's, and each field set otherwise
    /// must equal it. Without `init_from`, nothing changes.
    pub fn adopt_pretrained(&mut self, base: &ModelConfig, written: &[String]) -> Result<()> {
        let Some(dir) = self.init_from.clone() else {
            return Ok(());
        };
        let pretrained = Gpt2Config::read(&dir)?;
        let fields = [
            ("layers", &mut self.layers, base.layers, pretrained.n_layer),
            ("width", &mut self.width, base.width, pretrained.n_embd),
            ("heads", &mut self.heads, base.heads, pretrained.n_head),
        ];
        let unset = |field: &str| !written.iter().any(|w| w == field);
        for (field, value, base, theirs) in fields {
            if *value == base && unset(field) {
                *value = theirs;
            }
        }
        if self.tie_embeddings == base.tie_embeddings && unset("tie_embeddings") {
            self.tie_embeddings = pretrained.tie_word_embeddings;
        }
        self.vocab = self.vocab.or(Some(pretrained.vocab_size));
        self.norm_eps = self.norm_eps.or(Some(pretrained.layer_norm_epsilon));
        self.context = self.context.or(Some(pretrained.n_positions));
        self.preset = None;
        match self.pretrained_problems(&dir, &pretrained).as_slice() {
            [] => Ok(()),
            problems => Err(Error::Config {
                problems: problems.to_vec(),
            }),
        }
    }

    /// How the model's shape departs from the pretrained model's in `dir` (none when it fits
    /// or nothing is pretrained); an unreadable directory is one problem.
    pub fn pretrained_mismatches(&self) -> Vec<String> {
        let Some(dir) = &self.init_from else {
            return Vec::new();
        };
        match Gpt2Config::read(dir) {
            Ok(pretrained) => self.pretrained_problems(dir, &pretrained),
            Err(err) => vec![format!("model.init_from: {err}")],
        }
    }

    fn pretrained_problems(&self, dir: &Path, pretrained: &Gpt2Config) -> Vec<String> {
        let source = dir.join(headroom_nn::hf::CONFIG_FILE);
        let mut problems = Vec::new();
        if self.kind != ModelKind::Gpt {
            problems
                .push("model.init_from: pretrained weights are a GPT's; model.kind is mlp".into());
        }
        let mut differ = |field: &str, ours: String, theirs: String, name: &str| {
            problems.push(format!(
                "model.{field} = {ours} conflicts with {}, whose {name} is {theirs} (leave it \
                 unset to take the pretrained model's)",
                source.display()
            ));
        };
        for (field, ours, theirs, name) in [
            ("layers", self.layers, pretrained.n_layer, "n_layer"),
            ("width", self.width, pretrained.n_embd, "n_embd"),
            ("heads", self.heads, pretrained.n_head, "n_head"),
            (
                "vocab",
                self.vocab.unwrap_or(pretrained.vocab_size),
                pretrained.vocab_size,
                "vocab_size",
            ),
        ] {
            if ours != theirs {
                differ(field, ours.to_string(), theirs.to_string(), name);
            }
        }
        if self.tie_embeddings != pretrained.tie_word_embeddings {
            let (ours, theirs) = (self.tie_embeddings, pretrained.tie_word_embeddings);
            differ(
                "tie_embeddings",
                ours.to_string(),
                theirs.to_string(),
                "tie_word_embeddings",
            );
        }
        if let Some(eps) = self
            .norm_eps
            .filter(|&e| e != pretrained.layer_norm_epsilon)
        {
            let theirs = pretrained.layer_norm_epsilon;
            differ(
                "norm_eps",
                eps.to_string(),
                theirs.to_string(),
                "layer_norm_epsilon",
            );
        }
        if let Some(context) = self.context.filter(|&c| c > pretrained.n_positions) {
            problems.push(format!(
                "model.context = {context} is longer than {}'s n_positions of {}: the pretrained \
                 model has no position embeddings past it",
                source.display(),
                pretrained.n_positions
            ));
        }
        problems
    }
}

impl TrainConfig {
    /// Token shards tokenized by another tokenizer than the pretrained model's: the problem,
    /// naming both (none when either is absent, as the data or the model then says).
    pub fn pretrained_tokenizer_mismatch(&self) -> Option<String> {
        let pretrained = self
            .model
            .init_from
            .as_ref()?
            .join(crate::data::shards::TOKENIZER);
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
