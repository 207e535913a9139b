//! A byte-level BPE tokenizer (`tokenizer.json`) as llama.cpp's `gpt2` vocabulary: the token
//! list with each token's type, the merges, and the pre-tokenizer's name as llama.cpp knows it,
//! as its converter (`convert_hf_to_gguf.py`) writes them.

use std::path::Path;

use serde_json::Value as Json;

use crate::error::{Error, Result};

/// llama.cpp's token types (`llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TokenType {
    /// A token of the BPE vocabulary.
    Normal = 1,
    /// A special added token (`<|im_end|>`): never produced by splitting text.
    Control = 3,
    /// An added token that is not special: matched in text as it is.
    UserDefined = 4,
    /// An id the model has and the tokenizer does not (`[PAD{id}]`).
    Unused = 5,
}

/// The pre-tokenizers llama.cpp knows, each as a `tokenizer.json` spells it: a `Split` on its
/// regular expression (or `Digits` one at a time) then `ByteLevel`.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's, which splits digits one at a time.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A `tokenizer.json`'s vocabulary as llama.cpp's converter lists it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct BpeVocab {
    /// Each id's token, below the model's vocabulary.
    pub tokens: Vec<String>,
    /// Each id's type.
    pub types: Vec<TokenType>,
    /// The merges, each as its two parts joined by a space.
    pub merges: Vec<String>,
    /// llama.cpp's name of the pre-tokenizer: `gpt-2`, `llama-bpe`, `qwen2` or `smollm`.
    pub pre: &'static str,
    /// The added tokens' ids by content.
    pub added: Vec<(String, u64)>,
}

/// Reads the tokenizer at `path` as the `gpt2` vocabulary of a model of `vocab_size` tokens
/// (ids the tokenizer lacks become unused `[PAD{id}]` tokens). A tokenizer that is not
/// byte-level BPE, a pre-tokenizer llama.cpp would split text differently with, and an id at
/// or past `vocab_size` are [`Error::Checkpoint`] naming the file and the field.
pub(super) fn read_bpe(path: &Path, vocab_size: usize) -> Result<BpeVocab> {
    let json = crate::json_fields::read_json(path)?;
    let err = |key: &str, detail: String| Error::Checkpoint {
        path: path.to_owned(),
        key: key.to_owned(),
        detail,
    };
    let model = &json["model"];
    let kind = model["type"].as_str().unwrap_or("(none)");
    if kind != "BPE" {
        let detail = format!(
            "a {kind} model: only byte-level BPE tokenizers are written as GGUF (a \
             character-level run's tokenizer has no llama.cpp form)"
        );
        return Err(err("model.type", detail));
    }
    let pre = pre_tokenizer(&json["pre_tokenizer"]).map_err(|d| err("pre_tokenizer", d))?;
    let mut tokens: Vec<Option<(String, TokenType)>> = vec![None; vocab_size];
    let mut place =
        |id: u64, token: &str, ty: TokenType, key: &str| match tokens.get_mut(id as usize) {
            Some(slot) => {
                *slot = Some((token.to_owned(), ty));
                Ok(())
            }
            None => Err(err(
                key,
                format!("token {token:?} has id {id}, past the model's {vocab_size} tokens"),
            )),
        };
    let vocab = model["vocab"]
        .as_object()
        .ok_or_else(|| err("model.vocab", "not an object of tokens and ids".into()))?;
    for (token, id) in vocab {
        let id = id
            .as_u64()
            .ok_or_else(|| err("model.vocab", format!("token {token:?} has id {id}")))?;
        place(id, token, TokenType::Normal, "model.vocab")?;
    }
    let mut added = Vec::new();
    for entry in json["added_tokens"].as_array().into_iter().flatten() {
        let (Some(id), Some(content)) = (entry["id"].as_u64(), entry["content"].as_str()) else {
            return Err(err(
                "added_tokens",
                format!("an entry without an id and content: {entry}"),
            ));
        };
        let special = entry["special"].as_bool().unwrap_or(false);
        let ty = match special || looks_special(content) {
            true => TokenType::Control,
            false => TokenType::UserDefined,
        };
        place(id, content, ty, "added_tokens")?;
        added.push((content.to_owned(), id));
    }
    let (tokens, types) = tokens
        .into_iter()
        .enumerate()
        .map(|(id, slot)| slot.unwrap_or_else(|| (format!("[PAD{id}]"), TokenType::Unused)))
        .unzip();
    let merges = merges(&model["merges"]).map_err(|d| err("model.merges", d))?;
    Ok(BpeVocab {
        tokens,
        types,
        merges,
        pre,
        added,
    })
}

/// llama.cpp's converter's `does_token_look_special`: added tokens that ought to be control
/// tokens though not marked special.
fn looks_special(token: &str) -> bool {
    matches!(token, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (token.starts_with("<|") && token.ends_with("|>"))
        || (token.starts_with("<｜") && token.ends_with("｜>"))
        || (token.starts_with("<unused") && token.ends_with('>'))
}

/// The merges as llama.cpp lists them: `"a b"`, from either of `tokenizer.json`'s spellings
/// (strings, or pairs, whose spaces are written as U+0120 as the converter does).
fn merges(value: &Json) -> Result<Vec<String>, String> {
    let Some(items) = value.as_array() else {
        return Err("missing: a BPE tokenizer lists its merges".into());
    };
    items
        .iter()
        .map(|merge| match merge {
            Json::String(s) => Ok(s.clone()),
            Json::Array(pair) => match pair.as_slice() {
                [Json::String(a), Json::String(b)] => {
                    let part = |s: &str| s.replace(' ', "\u{0120}");
                    Ok(format!("{} {}", part(a), part(b)))
                }
                _ => Err(format!("{merge} is not a pair of strings")),
            },
            other => Err(format!("{other} is not a merge")),
        })
        .collect()
}

/// llama.cpp's name of the pre-tokenizer `value` describes; any it does not know is an error
/// naming what was found, since llama.cpp would split text otherwise than the model learned.
fn pre_tokenizer(value: &Json) -> Result<&'static str, String> {
    let kind = |v: &Json| v["type"].as_str().unwrap_or("").to_owned();
    let byte_level = |v: &Json, regex: bool| {
        kind(v) == "ByteLevel"
            && v["use_regex"].as_bool().unwrap_or(true) == regex
            && !v["add_prefix_space"].as_bool().unwrap_or(false)
    };
    let split = |v: &Json| -> Option<String> {
        (kind(v) == "Split" && v["behavior"] == "Isolated" && v["invert"] != true)
            .then(|| v["pattern"]["Regex"].as_str().map(str::to_owned))
            .flatten()
    };
    let steps: Vec<&Json> = match kind(value).as_str() {
        "Sequence" => value["pretokenizers"]
            .as_array()
            .into_iter()
            .flatten()
            .collect(),
        _ => vec![value],
    };
    let name = match steps.as_slice() {
        [one] if byte_level(one, true) => Some("gpt-2"),
        [digits, last]
            if kind(digits) == "Digits"
                && digits["individual_digits"] == true
                && byte_level(last, true) =>
        {
            Some("smollm")
        }
        [first, last] if byte_level(last, false) => match split(first).as_deref() {
            Some(LLAMA3_SPLIT) => Some("llama-bpe"),
            Some(QWEN2_SPLIT) => Some("qwen2"),
            _ => None,
        },
        _ => None,
    };
    name.ok_or_else(|| {
        format!(
            "{value}: not a pre-tokenizer llama.cpp knows (GPT-2's byte-level split, SmolLM2's \
             digits then GPT-2's, Llama 3's or Qwen2's split then bytes); llama.cpp would split \
             text otherwise than the model learned"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn known_pre_tokenizers_are_named_and_others_refused() {
        let byte_level =
            |regex| json!({"type": "ByteLevel", "add_prefix_space": false, "use_regex": regex});
        let split = |pattern: &str| json!({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false});
        let seq = |steps: Vec<Json>| json!({"type": "Sequence", "pretokenizers": steps});
        assert_eq!(pre_tokenizer(&byte_level(true)), Ok("gpt-2"));
        let digits = json!({"type": "Digits", "individual_digits": true});
        assert_eq!(
            pre_tokenizer(&seq(vec![digits.clone(), byte_level(true)])),
            Ok("smollm")
        );
        assert_eq!(
            pre_tokenizer(&seq(vec![split(LLAMA3_SPLIT), byte_level(false)])),
            Ok("llama-bpe")
        );
        assert_eq!(
            pre_tokenizer(&seq(vec![split(QWEN2_SPLIT), byte_level(false)])),
            Ok("qwen2")
        );
        for unknown in [
            byte_level(false),
            seq(vec![split(r"\s+"), byte_level(false)]),
            seq(vec![digits, byte_level(false)]),
            json!({"type": "Metaspace"}),
            Json::Null,
        ] {
            let err = pre_tokenizer(&unknown).unwrap_err();
            assert!(err.contains("not a pre-tokenizer llama.cpp knows"), "{err}");
        }
    }

    #[test]
    fn merges_of_either_spelling_join_with_a_space() {
        let old = json!(["Ġ t", "h e"]);
        let new = json!([["Ġ", "t"], ["h", "e"], ["a b", "c"]]);
        assert_eq!(merges(&old).unwrap(), ["Ġ t", "h e"]);
        assert_eq!(merges(&new).unwrap(), ["Ġ t", "h e", "aĠb c"]);
        assert!(merges(&json!([["a"]])).is_err());
        assert!(looks_special("<|im_start|>") && !looks_special("<x>"));
    }
}
