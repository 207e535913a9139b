//! Where a model keeps its chat template, and the special tokens the template reads: a Hugging
//! Face directory's `chat_template.jinja` or `tokenizer_config.json`, or a GGUF file's metadata.

use std::path::{Path, PathBuf};

use headroom_nn::gguf::{GgufFile, is_gguf};
use serde_json::Value;

use crate::error::{Error, Result};

/// The key of a GGUF file's chat template.
pub const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// The file transformers keeps a chat template in.
pub const CHAT_TEMPLATE_FILE: &str = "chat_template.jinja";

/// The tokenizer settings beside a Hugging Face model's tokenizer.
const TOKENIZER_CONFIG: &str = "tokenizer_config.json";

/// A chat template's source and the special tokens it is rendered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateSource {
    /// The Jinja source, as published.
    pub source: String,
    /// Where it was read.
    pub origin: PathBuf,
    /// The special tokens a template may name (`bos_token`, `eos_token`, `pad_token`,
    /// `unk_token`), by name, as their text.
    pub special: Vec<(String, String)>,
}

impl TemplateSource {
    /// The template of the model at `path`: a directory (`chat_template.jinja`, else the
    /// `chat_template` of `tokenizer_config.json`), a `tokenizer.json` (its directory's), or a
    /// GGUF file (`tokenizer.chat_template`). Without one, an error says where it looked.
    pub fn find(path: &Path) -> Result<Self> {
        if is_gguf(path) {
            return Self::from_gguf(path);
        }
        let dir = match path.is_dir() {
            true => path.to_owned(),
            false => path.parent().map(Path::to_owned).unwrap_or_default(),
        };
        let config = read_config(&dir.join(TOKENIZER_CONFIG))?;
        let special = config.as_ref().map(special_tokens).unwrap_or_default();
        let file = dir.join(CHAT_TEMPLATE_FILE);
        if file.is_file() {
            let source = std::fs::read_to_string(&file).map_err(Error::io(&file))?;
            return Ok(Self {
                source,
                origin: file,
                special,
            });
        }
        let origin = dir.join(TOKENIZER_CONFIG);
        match config.as_ref().and_then(|c| c.get("chat_template")) {
            Some(template) => Ok(Self {
                source: default_template(template).ok_or_else(|| Error::Data {
                    path: origin.clone(),
                    detail: "its `chat_template` is neither a string nor a list holding one \
                             named \"default\""
                        .into(),
                })?,
                origin,
                special,
            }),
            None => Err(Error::Data {
                path: dir,
                detail: format!(
                    "no chat template: neither {CHAT_TEMPLATE_FILE} nor a `chat_template` in \
                     {TOKENIZER_CONFIG} (give one with --chat-template)"
                ),
            }),
        }
    }

    /// The template of the file `file` (Jinja source), with the special tokens of the model
    /// at `model` where it names them.
    pub fn from_file(file: &Path, model: Option<&Path>) -> Result<Self> {
        let source = std::fs::read_to_string(file).map_err(Error::io(file))?;
        let special = match model {
            Some(model) if is_gguf(model) => gguf_special(&GgufFile::open(model)?)?,
            Some(model) => {
                let dir = match model.is_dir() {
                    true => model.to_owned(),
                    false => model.parent().map(Path::to_owned).unwrap_or_default(),
                };
                read_config(&dir.join(TOKENIZER_CONFIG))?
                    .as_ref()
                    .map(special_tokens)
                    .unwrap_or_default()
            }
            None => Vec::new(),
        };
        Ok(Self {
            source,
            origin: file.to_owned(),
            special,
        })
    }

    /// The template in the metadata of the GGUF file at `path`.
    fn from_gguf(path: &Path) -> Result<Self> {
        let file = GgufFile::open(path)?;
        if file.get(CHAT_TEMPLATE_KEY).is_none() {
            return Err(Error::Data {
                path: path.to_owned(),
                detail: format!(
                    "no chat template: its metadata has no `{CHAT_TEMPLATE_KEY}` (give one with \
                     --chat-template)"
                ),
            });
        }
        Ok(Self {
            source: file.get_str(CHAT_TEMPLATE_KEY)?.to_owned(),
            origin: path.to_owned(),
            special: gguf_special(&file)?,
        })
    }

    /// The text of the special token `name` (such as `eos_token`), when the model names it.
    pub fn special(&self, name: &str) -> Option<&str> {
        self.special
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.as_str())
    }
}

/// `tokenizer_config.json` at `path`, when there is one.
fn read_config(path: &Path) -> Result<Option<Value>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|err| Error::Data {
            path: path.to_owned(),
            detail: format!("not JSON: {err}"),
        })
}

/// The special tokens `tokenizer_config.json` names: strings, or objects with a `content`.
fn special_tokens(config: &Value) -> Vec<(String, String)> {
    ["bos_token", "eos_token", "pad_token", "unk_token"]
        .iter()
        .filter_map(|&name| {
            let value = config.get(name)?;
            let text = value
                .as_str()
                .or_else(|| value.get("content").and_then(Value::as_str))?;
            Some((name.to_owned(), text.to_owned()))
        })
        .collect()
}

/// The special tokens a GGUF file's metadata names by id.
fn gguf_special(file: &GgufFile) -> Result<Vec<(String, String)>> {
    let special = crate::data::gguf_tokenizer::special_tokens(file)?;
    Ok(special
        .into_iter()
        .map(|(name, text)| (name.to_owned(), text))
        .collect())
}

/// A `chat_template` value: a string, or transformers' list of named templates (the one named
/// "default").
fn default_template(value: &Value) -> Option<String> {
    if let Some(text) = value.as_str() {
        return Some(text.to_owned());
    }
    value.as_array()?.iter().find_map(|named| {
        (named.get("name")?.as_str()? == "default")
            .then(|| named.get("template")?.as_str().map(str::to_owned))
            .flatten()
    })
}
