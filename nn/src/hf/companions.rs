//! The files that travel with a model's weights and make it the same model to other tools: its
//! tokenizer (with its special tokens and chat template) and its generation defaults, and the
//! special token ids its `config.json` names.

use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::json_fields::{read_json, write_json};

/// The file name of the generation defaults.
pub const GENERATION_CONFIG: &str = "generation_config.json";

/// The tokenizer and generation files transformers saves beside a model, copied as they are.
pub const COMPANION_FILES: &[&str] = &[
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    GENERATION_CONFIG,
];

/// Copies each of [`COMPANION_FILES`] that `from` holds into `to`, each atomically (replacing
/// any there); returns the names copied.
pub fn copy_companions(from: &Path, to: &Path) -> Result<Vec<&'static str>> {
    let mut copied = Vec::new();
    for &name in COMPANION_FILES {
        if from.join(name).is_file() {
            copy_companion(from, name, to)?;
            copied.push(name);
        }
    }
    Ok(copied)
}

/// Copies the file `name` of `from` into `to`, atomically (replacing any there).
pub fn copy_companion(from: &Path, name: &str, to: &Path) -> Result<()> {
    let source = from.join(name);
    crate::checkpoint::write_atomically_with(&to.join(name), |temporary| {
        std::fs::copy(&source, temporary).map(drop)
    })
}

/// A model's special token ids, as its `config.json` and `generation_config.json` give them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// The beginning of a sequence.
    pub bos: Option<u64>,
    /// The ends of a sequence or a turn, where generation stops (transformers allows a list).
    pub eos: Vec<u64>,
    /// The padding token.
    pub pad: Option<u64>,
}

impl SpecialTokens {
    /// The ids `dir`'s `generation_config.json` gives, then those its `config.json` gives
    /// where the first is silent; none where neither file exists. A GGUF file gives those of
    /// its `tokenizer.ggml.*_token_id` keys ([`Self::from_gguf`]).
    pub fn read(dir: &Path) -> Result<Self> {
        if crate::gguf::is_gguf(dir) {
            return Self::from_gguf(&crate::gguf::GgufFile::open(dir)?);
        }
        let mut tokens = Self::default();
        for name in [GENERATION_CONFIG, crate::json_fields::CONFIG_FILE] {
            let path = dir.join(name);
            if path.is_file() {
                tokens.fill_from(&read_json(&path)?);
            }
        }
        Ok(tokens)
    }

    /// The ids of a GGUF file's `tokenizer.ggml.bos_token_id`, `eos_token_id` and
    /// `padding_token_id`, where it has them; a value that is no id is an error naming its key.
    pub fn from_gguf(file: &crate::gguf::GgufFile) -> Result<Self> {
        let id = |name: &str| -> Result<Option<u64>> {
            let key = format!("tokenizer.ggml.{name}_token_id");
            match file.get(&key) {
                Some(_) => file.get_u64(&key).map(Some),
                None => Ok(None),
            }
        };
        Ok(Self {
            bos: id("bos")?,
            eos: id("eos")?.into_iter().collect(),
            pad: id("padding")?,
        })
    }

    /// True when no id is known.
    pub fn is_empty(&self) -> bool {
        self.bos.is_none() && self.eos.is_empty() && self.pad.is_none()
    }

    /// Takes each id `json` gives that is still unknown.
    fn fill_from(&mut self, json: &Value) {
        let id = |key: &str| json.get(key).and_then(Value::as_u64);
        self.bos = self.bos.or(id("bos_token_id"));
        self.pad = self.pad.or(id("pad_token_id"));
        if self.eos.is_empty() {
            self.eos = match json.get("eos_token_id") {
                Some(Value::Array(ids)) => ids.iter().filter_map(Value::as_u64).collect(),
                Some(one) => one.as_u64().into_iter().collect(),
                None => Vec::new(),
            };
        }
    }

    /// Writes the known ids into the JSON file at `path` (a `config.json` or a
    /// `generation_config.json`), keeping its other fields; a list of one end id is written
    /// as that id.
    pub fn write_into(&self, path: &Path) -> Result<()> {
        let mut json = read_json(path)?;
        let Some(object) = json.as_object_mut() else {
            return Err(Error::Checkpoint {
                path: path.to_owned(),
                key: "(file)".into(),
                detail: "not a JSON object".into(),
            });
        };
        if let Some(bos) = self.bos {
            object.insert("bos_token_id".into(), bos.into());
        }
        match self.eos.as_slice() {
            [] => {}
            [one] => {
                object.insert("eos_token_id".into(), (*one).into());
            }
            many => {
                object.insert("eos_token_id".into(), many.to_vec().into());
            }
        }
        if let Some(pad) = self.pad {
            object.insert("pad_token_id".into(), pad.into());
        }
        write_json(path, &json)
    }
}
