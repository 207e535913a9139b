//! The identity a GGUF file carries in its metadata, written as the files a Hugging Face
//! directory keeps beside its weights: the tokenizer (`tokenizer.json`), its special tokens and
//! settings (`tokenizer_config.json`), the chat template (`chat_template.jinja`) and the special
//! token ids (`generation_config.json`), so that a run from the file and its exports keep them.

use std::path::Path;

use headroom_nn::gguf::GgufFile;
use headroom_nn::hf::{GENERATION_CONFIG, SpecialTokens};
use serde_json::{Map, Value, json};

use crate::data::chat::{CHAT_TEMPLATE_FILE, CHAT_TEMPLATE_KEY};
use crate::data::gguf_tokenizer::special_tokens;
use crate::data::shards::TOKENIZER;
use crate::data::tokenizer::TextTokenizer;
use crate::error::{Error, Result};

/// The identity files of the GGUF file at `path`, by name: `tokenizer.json` where its tokenizer
/// is built here (a tokenizer that is not is left out, with a warning: the data's may stand
/// in), `tokenizer_config.json`, `chat_template.jinja` where it has a template, and
/// `generation_config.json` where it names special token ids.
pub fn gguf_identity(path: &Path) -> Result<Vec<(&'static str, Vec<u8>)>> {
    let file = GgufFile::open(path)?;
    let mut files = Vec::new();
    match TextTokenizer::from_gguf(path) {
        Ok(tokenizer) => files.push((TOKENIZER, tokenizer.json().to_vec())),
        Err(err) => tracing::warn!("{err}: the run keeps no tokenizer of it"),
    }
    files.push(("tokenizer_config.json", tokenizer_config(&file)?));
    if file.get(CHAT_TEMPLATE_KEY).is_some() {
        let template = file.get_str(CHAT_TEMPLATE_KEY)?;
        files.push((CHAT_TEMPLATE_FILE, template.as_bytes().to_vec()));
    }
    let ids = SpecialTokens::from_gguf(&file)?;
    if !ids.is_empty() {
        let mut generation = Map::new();
        if let Some(bos) = ids.bos {
            generation.insert("bos_token_id".into(), bos.into());
        }
        let eos = match ids.eos.as_slice() {
            [] => None,
            [one] => Some(Value::from(*one)),
            many => Some(Value::from(many.to_vec())),
        };
        if let Some(eos) = eos {
            generation.insert("eos_token_id".into(), eos);
        }
        if let Some(pad) = ids.pad {
            generation.insert("pad_token_id".into(), pad.into());
        }
        files.push((GENERATION_CONFIG, pretty(path, &Value::Object(generation))?));
    }
    Ok(files)
}

/// `tokenizer_config.json` as transformers reads it for a tokenizer of `tokenizer.json` alone:
/// the special tokens by their text, whether a beginning or end of sequence is added, and the
/// model's longest input.
fn tokenizer_config(file: &GgufFile) -> Result<Vec<u8>> {
    let mut config = Map::new();
    config.insert("tokenizer_class".into(), "PreTrainedTokenizerFast".into());
    config.insert("clean_up_tokenization_spaces".into(), false.into());
    for (name, text) in special_tokens(file)? {
        config.insert(name.into(), text.into());
    }
    for flag in ["add_bos_token", "add_eos_token"] {
        let key = format!("tokenizer.ggml.{flag}");
        let value = match file.get(&key) {
            Some(_) => file.get_bool(&key)?,
            None => false,
        };
        config.insert(flag.into(), value.into());
    }
    let arch = file.get_str(headroom_nn::gguf::ARCHITECTURE_KEY)?;
    let context = format!("{arch}.context_length");
    if file.get(&context).is_some() {
        config.insert("model_max_length".into(), json!(file.get_u64(&context)?));
    }
    pretty(file.path(), &Value::Object(config))
}

/// `value` as pretty JSON with a final newline.
fn pretty(path: &Path, value: &Value) -> Result<Vec<u8>> {
    let mut text = serde_json::to_string_pretty(value).map_err(|err| Error::Data {
        path: path.to_owned(),
        detail: format!("cannot write its identity as JSON: {err}"),
    })?;
    text.push('\n');
    Ok(text.into_bytes())
}
