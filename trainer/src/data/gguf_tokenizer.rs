//! A tokenizer built from a GGUF file's own metadata, so that the file alone is enough to train,
//! evaluate and generate: a byte-level BPE (`tokenizer.ggml.model` `gpt2`, as SmolLM2, Qwen and
//! Llama 3 use) from its token list, merges and token types, split as its pre-tokenizer
//! (`tokenizer.ggml.pre`) says, with its control tokens special and its beginning-of-sequence
//! token added where `tokenizer.ggml.add_bos_token` asks.

use headroom_nn::gguf::GgufFile;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::processors::sequence::Sequence;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer};

use super::gguf_pre::{KNOWN, pre_tokenization};
use crate::error::Result;

/// The key naming the tokenizer's kind.
const MODEL_KEY: &str = "tokenizer.ggml.model";

/// The key holding every token, by id.
pub const TOKENS_KEY: &str = "tokenizer.ggml.tokens";

/// llama.cpp's token types (`tokenizer.ggml.token_type`): a control token (special) and a
/// user-defined one (matched whole, not special).
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

/// An error naming `file` and its key `key`.
fn key_error(file: &GgufFile, key: &str, detail: String) -> crate::error::Error {
    headroom_nn::Error::Gguf {
        path: file.path().to_owned(),
        item: format!("key `{key}`"),
        detail,
    }
    .into()
}

/// The tokenizer the metadata of `file` describes. A kind other than `gpt2` (SentencePiece's
/// `llama` among them), a pre-tokenizer not mapped here, or a token list, merge or type that
/// cannot be read is an error naming the file and the key.
pub fn gguf_tokenizer(file: &GgufFile) -> Result<Tokenizer> {
    match file.get_str(MODEL_KEY)? {
        "gpt2" => {}
        "llama" => {
            return Err(key_error(
                file,
                MODEL_KEY,
                "a SentencePiece tokenizer (`llama`), which is not built from GGUF metadata \
                 here yet: give the model's tokenizer.json (--tokenizer)"
                    .into(),
            ));
        }
        other => {
            return Err(key_error(
                file,
                MODEL_KEY,
                format!("{other:?} tokenizers are not built here; only byte-level BPE (gpt2)"),
            ));
        }
    }
    let tokens = strings(file, TOKENS_KEY)?;
    let mut vocab = Vocab::default();
    for (id, token) in tokens.iter().enumerate() {
        let id = u32::try_from(id)
            .map_err(|_| key_error(file, TOKENS_KEY, "more tokens than u32 ids".into()))?;
        if let Some(first) = vocab.insert((*token).to_owned(), id) {
            let detail = format!("the token {token:?} appears twice, as ids {first} and {id}");
            return Err(key_error(file, TOKENS_KEY, detail));
        }
    }
    let merges_key = "tokenizer.ggml.merges";
    let merges = strings(file, merges_key)?
        .into_iter()
        .enumerate()
        .map(|(i, merge)| {
            merge
                .split_once(' ')
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .ok_or_else(|| {
                    key_error(
                        file,
                        merges_key,
                        format!("merge #{i} {merge:?} is not two tokens"),
                    )
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let pre_key = "tokenizer.ggml.pre";
    let pre = match file.get(pre_key) {
        Some(_) => file.get_str(pre_key)?,
        None => "default",
    };
    let split = pre_tokenization(pre).ok_or_else(|| {
        let detail = format!("the pre-tokenizer {pre:?} is not mapped here (known: {KNOWN})");
        key_error(file, pre_key, detail)
    })?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(split.ignore_merges)
        .build()
        .map_err(|err| key_error(file, merges_key, format!("no BPE of these merges: {err}")))?;
    let mut tokenizer = Tokenizer::new(bpe);
    if let Some(normalizer) = split.normalizer {
        tokenizer
            .with_normalizer(Some(normalizer))
            .map_err(|err| key_error(file, pre_key, err.to_string()))?;
    }
    tokenizer.with_pre_tokenizer(Some(split.pre_tokenizer));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    tokenizer.with_post_processor(Some(post_processor(file, &tokens, split.add_bos)?));
    let (special, user) = added_tokens(file, &tokens)?;
    tokenizer
        .add_special_tokens(special)
        .map_err(|err| key_error(file, TOKENS_KEY, err.to_string()))?;
    tokenizer
        .add_tokens(user)
        .map_err(|err| key_error(file, TOKENS_KEY, err.to_string()))?;
    Ok(tokenizer)
}

/// The strings of the array `key`.
fn strings<'a>(file: &'a GgufFile, key: &str) -> Result<Vec<&'a str>> {
    file.get_array(key)?
        .iter()
        .enumerate()
        .map(|(i, value)| {
            value
                .as_str()
                .ok_or_else(|| key_error(file, key, format!("item #{i} is {value}, not a string")))
        })
        .collect()
}

/// The control tokens (special) and the user-defined ones, by `tokenizer.ggml.token_type`.
fn added_tokens(file: &GgufFile, tokens: &[&str]) -> Result<(Vec<AddedToken>, Vec<AddedToken>)> {
    let key = "tokenizer.ggml.token_type";
    let (mut special, mut user) = (Vec::new(), Vec::new());
    if file.get(key).is_none() {
        return Ok((special, user));
    }
    let types = file.get_array(key)?;
    if types.len() != tokens.len() {
        let detail = format!("{} types for {} tokens", types.len(), tokens.len());
        return Err(key_error(file, key, detail));
    }
    for (i, (ty, token)) in types.iter().zip(tokens).enumerate() {
        match ty.as_i64() {
            Some(CONTROL) => special.push(AddedToken::from(*token, true).normalized(false)),
            Some(USER_DEFINED) => user.push(AddedToken::from(*token, false).normalized(false)),
            Some(_) => {}
            None => return Err(key_error(file, key, format!("item #{i} is {ty}"))),
        }
    }
    Ok((special, user))
}

/// What follows each encoding: the beginning-of-sequence token in front where
/// `tokenizer.ggml.add_bos_token` says so (or, where it is absent, `add_bos`: Llama 3's), the
/// end-of-sequence token behind where `add_eos_token` does, after the byte-level offsets'
/// processor.
fn post_processor(file: &GgufFile, tokens: &[&str], add_bos: bool) -> Result<PostProcessorWrapper> {
    let byte_level = ByteLevel::new(true, false, true);
    let bos = end_token(file, tokens, "bos", add_bos)?;
    let eos = end_token(file, tokens, "eos", false)?;
    if bos.is_none() && eos.is_none() {
        return Ok(byte_level.into());
    }
    let sequence = |name: &str, type_id: u32| -> Vec<String> {
        let mut pieces: Vec<String> = bos.iter().map(|(t, _)| format!("{t}:{type_id}")).collect();
        pieces.push(format!("{name}:{type_id}"));
        pieces.extend(eos.iter().map(|(t, _)| format!("{t}:{type_id}")));
        pieces
    };
    let mut pair = sequence("$A", 0);
    pair.extend(sequence("$B", 1));
    let key = "tokenizer.ggml.add_bos_token";
    let template = TemplateProcessing::builder()
        .try_single(sequence("$A", 0))
        .and_then(|builder| builder.try_pair(pair))
        .map_err(|err| key_error(file, key, format!("no template of its tokens: {err}")))?
        .special_tokens(bos.into_iter().chain(eos).collect::<Vec<_>>())
        .build()
        .map_err(|err| key_error(file, key, format!("no template of its tokens: {err}")))?;
    Ok(Sequence::new(vec![byte_level.into(), template.into()]).into())
}

/// The token and id of `tokenizer.ggml.{name}_token_id` (`bos` or `eos`) where
/// `tokenizer.ggml.add_{name}_token` is true (or absent, and `absent` is); none otherwise.
fn end_token(
    file: &GgufFile,
    tokens: &[&str],
    name: &str,
    absent: bool,
) -> Result<Option<(String, u32)>> {
    let flag = format!("tokenizer.ggml.add_{name}_token");
    let added = match file.get(&flag) {
        Some(_) => file.get_bool(&flag)?,
        None => absent,
    };
    if !added {
        return Ok(None);
    }
    let key = format!("tokenizer.ggml.{name}_token_id");
    let id = file.get_u64(&key)?;
    let token = usize::try_from(id).ok().and_then(|i| tokens.get(i));
    match (token, u32::try_from(id)) {
        (Some(token), Ok(id)) => Ok(Some((token.to_string(), id))),
        _ => Err(key_error(file, &key, format!("{id} is not a token's id"))),
    }
}

/// The special tokens a GGUF file's `tokenizer.ggml.*_token_id` keys name, as
/// `tokenizer_config.json` names them (`bos_token`, `eos_token`, `unk_token`, `pad_token`), each
/// with its text; an id past the vocabulary is left out.
pub fn special_tokens(file: &GgufFile) -> Result<Vec<(&'static str, String)>> {
    let tokens = match file.get(TOKENS_KEY) {
        Some(_) => file.get_array(TOKENS_KEY)?,
        None => &[],
    };
    let mut special = Vec::new();
    for (name, key) in [
        ("bos_token", "bos_token_id"),
        ("eos_token", "eos_token_id"),
        ("unk_token", "unknown_token_id"),
        ("pad_token", "padding_token_id"),
    ] {
        let key = format!("tokenizer.ggml.{key}");
        if file.get(&key).is_none() {
            continue;
        }
        let id = file.get_u64(&key)?;
        let text = usize::try_from(id)
            .ok()
            .and_then(|id| tokens.get(id))
            .and_then(|t| t.as_str());
        if let Some(text) = text {
            special.push((name, text.to_owned()));
        }
    }
    Ok(special)
}
