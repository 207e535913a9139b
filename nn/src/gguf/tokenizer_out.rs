//! A model's tokenizer as GGUF metadata (`tokenizer.*`), from the files that travel with it:
//! `tokenizer.json` (the vocabulary, [`vocab_out`](super::vocab_out)), `tokenizer_config.json`
//! (the special tokens, whether a text starts with the beginning token, the chat template),
//! `chat_template.jinja` or `chat_template.json`, as gguf-py's `SpecialVocab` reads them.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use super::Value;
use super::vocab_out::{BpeVocab, read_bpe};
use crate::error::{Error, Result};

/// The special tokens GGUF files name: each as `tokenizer_config.json` names it (`{kind}_token`)
/// and the key of its id (`tokenizer.ggml.{key}`, gguf-py's spelling).
const SPECIAL: [(&str, &str); 6] = [
    ("bos", "bos_token_id"),
    ("eos", "eos_token_id"),
    ("unk", "unknown_token_id"),
    ("sep", "seperator_token_id"),
    ("pad", "padding_token_id"),
    ("mask", "mask_token_id"),
];

/// Special token ids known apart from the tokenizer's files (a model's `config.json` or
/// `generation_config.json`, the tokenizer's end of text), for those its files do not name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialIds {
    /// The beginning of a sequence.
    pub bos: Option<u64>,
    /// The end of a sequence.
    pub eos: Option<u64>,
    /// The padding token.
    pub pad: Option<u64>,
}

/// A tokenizer as the metadata of a GGUF file of llama.cpp's `gpt2` (byte-level BPE) kind.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufTokenizer {
    /// The `tokenizer.*` keys and values, in the order they are written.
    pub metadata: Vec<(String, Value)>,
    /// The pre-tokenizer's name as llama.cpp knows it (`tokenizer.ggml.pre`).
    pub pre: &'static str,
    /// How many tokens are listed: the model's vocabulary.
    pub tokens: usize,
    /// Whether a chat template was found.
    pub chat_template: bool,
}

impl GgufTokenizer {
    /// Reads the tokenizer of a model of `vocab_size` tokens from the first of `sources`
    /// (directories) holding each file: `tokenizer.json` (required), `tokenizer_config.json`,
    /// `chat_template.jinja`, `chat_template.json`. Special ids come from the tokenizer's
    /// post-processor and `tokenizer_config.json`, then from `fallback`; `add_bos_token` from
    /// the post-processor, then `tokenizer_config.json`, false otherwise. Errors name the file
    /// and the field at fault.
    pub fn read(sources: &[PathBuf], vocab_size: usize, fallback: &SpecialIds) -> Result<Self> {
        let find = |name: &str| sources.iter().map(|s| s.join(name)).find(|p| p.is_file());
        let tokenizer_path = find("tokenizer.json").ok_or_else(|| {
            let dirs: Vec<String> = sources.iter().map(|s| s.display().to_string()).collect();
            Error::config(
                "GGUF tokenizer",
                format!(
                    "no tokenizer.json in {}: a GGUF file carries its tokenizer",
                    dirs.join(" or ")
                ),
            )
        })?;
        let vocab = read_bpe(&tokenizer_path, vocab_size)?;
        let tokenizer = crate::json_fields::read_json(&tokenizer_path)?;
        let config = match find("tokenizer_config.json") {
            Some(path) => Some((crate::json_fields::read_json(&path)?, path)),
            None => None,
        };
        let mut from_template = Vec::new();
        let (add_bos, add_eos) =
            post_processor(&tokenizer["post_processor"], &vocab, &mut from_template);
        let mut add = [("bos", add_bos), ("eos", add_eos)];
        let mut ids: Vec<(&str, u64)> = Vec::new();
        if let Some((config, path)) = &config {
            for (kind, flag) in &mut add {
                *flag = flag.or(config[format!("add_{kind}_token")].as_bool());
            }
            for (kind, _) in SPECIAL {
                let entry = &config[format!("{kind}_token")];
                let content = entry.as_str().or_else(|| entry["content"].as_str());
                let id = content.and_then(|c| vocab.added.iter().find(|(t, _)| t == c));
                if let Some(&(_, id)) = id {
                    set(&mut ids, kind, id);
                }
                check_id(&ids, kind, vocab_size, path)?;
            }
        }
        for (kind, id) in from_template {
            set(&mut ids, kind, id);
        }
        for (kind, id) in [
            ("bos", fallback.bos),
            ("eos", fallback.eos),
            ("pad", fallback.pad),
        ] {
            if let Some(id) = id.filter(|&id| id < vocab_size as u64) {
                set(&mut ids, kind, id);
            }
        }
        let template = chat_template(config.as_ref(), &find)?;
        let mut metadata = vec![
            key("ggml.model", Value::String("gpt2".into())),
            key("ggml.pre", Value::String(vocab.pre.into())),
            key("ggml.tokens", strings(&vocab.tokens)),
            key(
                "ggml.token_type",
                Value::Array(
                    super::ValueType::I32,
                    vocab.types.iter().map(|&t| Value::I32(t as i32)).collect(),
                ),
            ),
            key("ggml.merges", strings(&vocab.merges)),
        ];
        for (kind, name) in SPECIAL {
            if let Some(&(_, id)) = ids.iter().find(|(k, _)| *k == kind) {
                metadata.push(key(&format!("ggml.{name}"), Value::U32(id as u32)));
            }
        }
        for (kind, flag) in add {
            let flag = Value::Bool(flag.unwrap_or(false));
            metadata.push(key(&format!("ggml.add_{kind}_token"), flag));
        }
        let has_template = !template.is_empty();
        metadata.extend(template);
        Ok(Self {
            metadata,
            pre: vocab.pre,
            tokens: vocab.tokens.len(),
            chat_template: has_template,
        })
    }
}

/// The pair `tokenizer.{name}`.
fn key(name: &str, value: Value) -> (String, Value) {
    (format!("tokenizer.{name}"), value)
}

/// An array of strings.
fn strings(items: &[String]) -> Value {
    Value::Array(
        super::ValueType::String,
        items.iter().map(|s| Value::String(s.clone())).collect(),
    )
}

/// Sets `kind`'s id unless it is set.
fn set(ids: &mut Vec<(&'static str, u64)>, kind: &'static str, id: u64) {
    if !ids.iter().any(|(k, _)| *k == kind) {
        ids.push((kind, id));
    }
}

/// An error where `kind`'s id is not a token of the model.
fn check_id(ids: &[(&str, u64)], kind: &str, vocab_size: usize, path: &Path) -> Result<()> {
    match ids.iter().find(|(k, _)| *k == kind) {
        Some(&(_, id)) if id >= vocab_size as u64 => Err(Error::Checkpoint {
            path: path.to_owned(),
            key: format!("{kind}_token"),
            detail: format!("token id {id}, past the model's {vocab_size} tokens"),
        }),
        _ => Ok(()),
    }
}

/// Whether the tokenizer's post-processor puts a beginning and an end token around a text
/// (gguf-py's reading of a `TemplateProcessing`; none where it does not say), setting the
/// beginning and end ids of the tokens it puts.
fn post_processor(
    value: &Json,
    vocab: &BpeVocab,
    ids: &mut Vec<(&'static str, u64)>,
) -> (Option<bool>, Option<bool>) {
    let (mut bos, mut eos) = (None, None);
    let steps: Vec<&Json> = match value["processors"].as_array() {
        Some(steps) => steps.iter().collect(),
        None => vec![value],
    };
    let id_of = |content: &str| {
        vocab
            .added
            .iter()
            .find(|(t, _)| t == content)
            .map(|&(_, id)| id)
    };
    for step in steps {
        match step["type"].as_str() {
            Some("ByteLevel") => {
                bos = bos.or(Some(false));
                eos = eos.or(Some(false));
            }
            Some("TemplateProcessing") => {
                let single = step["single"].as_array().map(Vec::as_slice).unwrap_or(&[]);
                if single.len() > 1 {
                    if let Some(first) = single.first().and_then(special_token) {
                        bos = Some(true);
                        if let Some(id) = id_of(first) {
                            set(ids, "bos", id);
                        }
                    }
                    if let Some(last) = single.last().and_then(special_token) {
                        eos = Some(true);
                        if let Some(id) = id_of(last) {
                            set(ids, "eos", id);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    (bos, eos)
}

/// The content of a template item that is a special token.
fn special_token(item: &Json) -> Option<&str> {
    item["SpecialToken"]["id"].as_str()
}

/// The chat template's keys: `tokenizer_config.json`'s `chat_template` (a string, or named
/// templates: `default` as `tokenizer.chat_template`, the others as
/// `tokenizer.chat_template.{name}` listed in `tokenizer.chat_templates`), else
/// `chat_template.jinja`, else `chat_template.json`'s; none where there is none.
fn chat_template(
    config: Option<&(Json, PathBuf)>,
    find: &dyn Fn(&str) -> Option<PathBuf>,
) -> Result<Vec<(String, Value)>> {
    let one = |text: &str| vec![key("chat_template", Value::String(text.to_owned()))];
    if let Some((config, path)) = config {
        match &config["chat_template"] {
            Json::Null => {}
            Json::String(text) => return Ok(one(text)),
            Json::Array(named) => {
                let mut out = Vec::new();
                let mut names = Vec::new();
                for entry in named {
                    let (Some(name), Some(text)) =
                        (entry["name"].as_str(), entry["template"].as_str())
                    else {
                        continue;
                    };
                    let name: String = name
                        .chars()
                        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                        .collect();
                    match name.as_str() {
                        "" => {}
                        "default" => {
                            out.insert(0, key("chat_template", Value::String(text.into())))
                        }
                        _ => {
                            out.push(key(
                                &format!("chat_template.{name}"),
                                Value::String(text.into()),
                            ));
                            names.push(name);
                        }
                    }
                }
                if !names.is_empty() {
                    out.push(key("chat_templates", strings(&names)));
                }
                return Ok(out);
            }
            other => {
                return Err(Error::Checkpoint {
                    path: path.clone(),
                    key: "chat_template".into(),
                    detail: format!("{other} is neither a template nor a list of named ones"),
                });
            }
        }
    }
    if let Some(path) = find("chat_template.jinja") {
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io { path, source })?;
        return Ok(one(&text));
    }
    if let Some(path) = find("chat_template.json") {
        let json = crate::json_fields::read_json(&path)?;
        if let Some(text) = json["chat_template"].as_str() {
            return Ok(one(text));
        }
    }
    Ok(Vec::new())
}
