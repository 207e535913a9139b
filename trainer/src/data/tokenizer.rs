//! Text to token ids and back, through Hugging Face's `tokenizers`: a `tokenizer.json` loaded
//! as it is (GPT-2's, or one trained here), or a byte-level BPE trained on the user's files the
//! way GPT-2's was (bytes as the first 256 tokens, no prefix space, the end-of-text token).
//!
//! A character-level run (`data.kind = "text"`) keeps its character vocabulary the same way,
//! as a `tokenizer.json` of one token a character (as nanoGPT's `shakespeare_char` keeps its
//! `meta.pkl`): [`TextTokenizer::characters`].
//!
//! A tokenizer is known by the FNV-1a hash of its `tokenizer.json` bytes: token shards record
//! it, so data tokenized by one tokenizer is never read with another. A GGUF file's tokenizer,
//! built from its metadata, is known by the `tokenizer.json` it is written as.

use std::path::{Path, PathBuf};

use tokenizers::decoders::fuse::Fuse;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::models::wordlevel::WordLevel;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::fixed_length::FixedLength;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{AddedToken, ModelWrapper, Tokenizer, TokenizerBuilder};

use super::gguf_tokenizer::gguf_tokenizer;
use crate::error::{Error, Result};

/// GPT-2's document separator, which a trained tokenizer reserves as a special token (id 0).
pub const END_OF_TEXT: &str = "<|endoftext|>";

/// The tokens that end a text, by the families that use them: GPT-2's, SmolLM2's and Qwen's
/// `<|endoftext|>`, Llama 3's `<|end_of_text|>`, Llama 2's and Mistral's `</s>`. A tokenizer's
/// end of text is the first of them it has.
pub const END_OF_TEXT_TOKENS: [&str; 3] = [END_OF_TEXT, "<|end_of_text|>", "</s>"];

/// The tokens that end a turn of a chat model (Llama 3's `<|eot_id|>`, Qwen's and SmolLM2's
/// `<|im_end|>`): generation stops at them too.
pub const END_OF_TURN_TOKENS: [&str; 2] = ["<|eot_id|>", "<|im_end|>"];

/// The smallest vocabulary a byte-level BPE can have: the 256 bytes and the end-of-text token.
pub const MIN_BPE_VOCAB: usize = 257;

/// The unknown token a character vocabulary names but never holds: a character outside the
/// vocabulary is an error, never a silent stand-in.
const UNKNOWN: &str = "<unk>";

/// A tokenizer and what identifies it.
pub struct TextTokenizer {
    inner: Tokenizer,
    path: PathBuf,
    hash: u64,
    /// Its `tokenizer.json` bytes, which the hash is of.
    json: Vec<u8>,
    /// One token a character (a character-level run's vocabulary).
    characters: bool,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("path", &self.path)
            .field("vocab", &self.vocab())
            .field("hash", &format_args!("{:016x}", self.hash))
            .finish()
    }
}

impl TextTokenizer {
    /// Loads a `tokenizer.json` (a file, or a directory holding one, such as a Hugging Face
    /// model's).
    ///
    /// A GGUF file gives the tokenizer its metadata describes ([`Self::from_gguf`]).
    pub fn load(path: &Path) -> Result<Self> {
        let path = if path.is_dir() {
            path.join("tokenizer.json")
        } else {
            path.to_owned()
        };
        if headroom_nn::gguf::is_gguf(&path) {
            return Self::from_gguf(&path);
        }
        let bytes = std::fs::read(&path).map_err(Error::io(&path))?;
        Self::from_json(path, bytes)
    }

    /// The tokenizer the metadata of the GGUF file at `path` describes ([`gguf_tokenizer`]),
    /// known by the hash of the `tokenizer.json` it is written as ([`Self::json`]).
    pub fn from_gguf(path: &Path) -> Result<Self> {
        let file = headroom_nn::gguf::GgufFile::open(path)?;
        let tokenizer = gguf_tokenizer(&file)?;
        let json = serde_json::to_vec(&tokenizer).map_err(|err| Error::Data {
            path: path.to_owned(),
            detail: format!("cannot write its tokenizer as JSON: {err}"),
        })?;
        Self::from_json(path.to_owned(), json)
    }

    /// The tokenizer of the `tokenizer.json` `bytes`, read from `path`.
    fn from_json(path: PathBuf, bytes: Vec<u8>) -> Result<Self> {
        let inner = Tokenizer::from_bytes(&bytes).map_err(|err| Error::Data {
            path: path.clone(),
            detail: format!("not a tokenizer.json that Hugging Face's tokenizers reads: {err}"),
        })?;
        let characters = matches!(inner.get_model(), ModelWrapper::WordLevel(_))
            && matches!(
                inner.get_pre_tokenizer(),
                Some(PreTokenizerWrapper::FixedLength(split)) if split.length == 1
            );
        Ok(Self {
            inner,
            hash: fnv1a(&bytes),
            json: bytes,
            path,
            characters,
        })
    }

    /// A tokenizer of one token a character, token `i` being `vocab[i]`, saved to `out` as a
    /// `tokenizer.json` (a word-level model over single characters, joined again on decoding)
    /// that Hugging Face's `tokenizers` reads as well.
    pub fn characters(vocab: &[char], out: &Path) -> Result<Self> {
        let ids = vocab
            .iter()
            .enumerate()
            .map(|(id, c)| (c.to_string(), id as u32))
            .collect();
        let cannot = |err: tokenizers::Error| {
            Error::config(format!("cannot build a character tokenizer: {err}"))
        };
        let model = WordLevel::builder()
            .vocab(ids)
            .unk_token(UNKNOWN.into())
            .build()
            .map_err(cannot)?;
        let tokenizer = TokenizerBuilder::<
            WordLevel,
            NormalizerWrapper,
            FixedLength,
            PostProcessorWrapper,
            Fuse,
        >::new()
        .with_model(model)
        .with_pre_tokenizer(Some(FixedLength::new(1)))
        .with_decoder(Some(Fuse::new()))
        .build()
        .map_err(cannot)?;
        Self::write_and_load(&tokenizer, out)
    }

    /// Trains a byte-level BPE of `vocab` tokens (the end-of-text token included) on `files`
    /// and saves it to `out`. Files that are not UTF-8 text must be left out by the caller.
    pub fn train(files: &[PathBuf], vocab: usize, out: &Path) -> Result<Self> {
        if vocab < MIN_BPE_VOCAB {
            return Err(Error::config(format!(
                "--vocab {vocab}: a byte-level BPE needs at least {MIN_BPE_VOCAB} tokens (the \
                 256 bytes and {END_OF_TEXT})"
            )));
        }
        if files.is_empty() {
            return Err(Error::config("no text files to train a tokenizer on"));
        }
        let mut trainer = BpeTrainerBuilder::new()
            .vocab_size(vocab)
            .min_frequency(2)
            .show_progress(false)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .special_tokens(vec![AddedToken::from(END_OF_TEXT, true)])
            .build();
        let byte_level = ByteLevel::default().add_prefix_space(false);
        let mut tokenizer =
            TokenizerBuilder::<BPE, NormalizerWrapper, ByteLevel, ByteLevel, ByteLevel>::new()
                .with_model(BPE::default())
                .with_pre_tokenizer(Some(byte_level))
                .with_post_processor(Some(byte_level.trim_offsets(false)))
                .with_decoder(Some(byte_level))
                .build()
                .map_err(|err| Error::config(format!("cannot build a byte-level BPE: {err}")))?;
        let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        tokenizer
            .train_from_files(&mut trainer, names)
            .map_err(|err| Error::Data {
                path: files[0].clone(),
                detail: format!("training the tokenizer on these files failed: {err}"),
            })?;
        Self::write_and_load(&tokenizer, out)
    }

    /// Writes `tokenizer` as a `tokenizer.json` file at `out`, atomically, and loads it back.
    fn write_and_load(tokenizer: &impl serde::Serialize, out: &Path) -> Result<Self> {
        let json = serde_json::to_string(tokenizer).map_err(|err| Error::Data {
            path: out.to_owned(),
            detail: format!("cannot write the tokenizer: {err}"),
        })?;
        crate::atomic_file::write_atomically(out, json.as_bytes())?;
        Self::load(out)
    }

    /// The number of token ids, special tokens included.
    pub fn vocab(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The FNV-1a hash of its `tokenizer.json` bytes.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// Its `tokenizer.json` bytes: the file's, or those a GGUF file's tokenizer is written as.
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// Where it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The id of the end-of-text token, when it has one (the first of
    /// [`END_OF_TEXT_TOKENS`] it has).
    pub fn end_of_text(&self) -> Option<u32> {
        END_OF_TEXT_TOKENS
            .iter()
            .find_map(|token| self.inner.token_to_id(token))
    }

    /// The id of the token the tokenizer puts in front of a document (Llama 3's
    /// `<|begin_of_text|>`), when it puts one.
    pub fn begin_of_text(&self) -> Option<u32> {
        let empty = self.inner.encode_fast("", true).ok()?;
        empty.get_ids().first().copied()
    }

    /// The ids generation stops at: the end of text and the ends of turns it has.
    pub fn stops(&self) -> Vec<u32> {
        let turns = END_OF_TURN_TOKENS
            .iter()
            .filter_map(|t| self.inner.token_to_id(t));
        self.end_of_text().into_iter().chain(turns).collect()
    }

    /// The ids of a document or a prompt as the model expects to read it: `text` with the
    /// special tokens the tokenizer's post-processor adds (Llama 3's `<|begin_of_text|>` in
    /// front; nothing for GPT-2's, Qwen's or SmolLM2's).
    pub fn encode_document(&self, text: &str) -> Result<Vec<u32>> {
        self.encoded(text, true)
    }

    /// True for a character-level run's tokenizer (one token a character).
    pub fn is_characters(&self) -> bool {
        self.characters
    }

    /// The ids of `text`, without special tokens added. A character the character vocabulary
    /// lacks is an error naming every such character.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encoded(text, false)
    }

    /// The ids of `text`, with the post-processor's special tokens when `special`; refused for
    /// characters a character vocabulary lacks.
    fn encoded(&self, text: &str, special: bool) -> Result<Vec<u32>> {
        if self.characters {
            self.check_characters(text)?;
        }
        let encoding = self
            .inner
            .encode_fast(text, special)
            .map_err(|err| self.error(format!("cannot encode the text: {err}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The ids of `text` without special tokens added, and each token's byte range in it.
    pub fn encode_with_offsets(&self, text: &str) -> Result<(Vec<u32>, Vec<Offsets>)> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|err| self.error(format!("cannot encode the text: {err}")))?;
        Ok((encoding.get_ids().to_vec(), encoding.get_offsets().to_vec()))
    }

    /// The id of the token `token` (a special token's text, say), when the vocabulary has it.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The text of `ids` (special tokens kept, so a sample shows where documents end).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|err| self.error(format!("cannot decode ids {ids:?}: {err}")))
    }

    /// Refuses `text` when it holds characters the character vocabulary lacks.
    fn check_characters(&self, text: &str) -> Result<()> {
        let mut unknown: Vec<char> = text
            .chars()
            .filter(|c| self.inner.token_to_id(&c.to_string()).is_none())
            .collect();
        unknown.sort_unstable();
        unknown.dedup();
        if unknown.is_empty() {
            return Ok(());
        }
        let named: Vec<String> = unknown.iter().map(|c| format!("{c:?}")).collect();
        Err(self.error(format!(
            "the text holds {} character(s) that the run's vocabulary of {} characters (those \
             of its training text) lacks: {}",
            unknown.len(),
            self.vocab(),
            named.join(", ")
        )))
    }

    fn error(&self, detail: String) -> Error {
        Error::Data {
            path: self.path.clone(),
            detail,
        }
    }
}

/// A token's byte range in the text it was encoded from: its start and its end.
pub type Offsets = (usize, usize);

/// A tokenizer's hash as manifests write it: 16 hex digits.
pub fn hash_hex(hash: u64) -> String {
    format!("{hash:016x}")
}

/// The hash of the `tokenizer.json` at `path` (or of the one a GGUF file's tokenizer is written
/// as), as manifests write it.
pub fn file_hash(path: &Path) -> Result<String> {
    if headroom_nn::gguf::is_gguf(path) {
        return Ok(hash_hex(TextTokenizer::from_gguf(path)?.hash()));
    }
    let bytes = std::fs::read(path).map_err(Error::io(path))?;
    Ok(hash_hex(fnv1a(&bytes)))
}

/// The 64-bit FNV-1a hash of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_tokenizer_round_trips_its_characters_and_names_unknown_ones() {
        let out = std::env::temp_dir().join(format!("headroom-chars-{}.json", std::process::id()));
        let vocab = ['\n', ' ', '!', 'a', 'b', 'é'];
        let tokenizer = TextTokenizer::characters(&vocab, &out).unwrap();
        assert!(tokenizer.is_characters());
        assert_eq!(tokenizer.vocab(), 6);
        assert_eq!(tokenizer.end_of_text(), None);
        let ids = tokenizer.encode("ab é!\n").unwrap();
        assert_eq!(ids, vec![3, 4, 1, 5, 2, 0]);
        assert_eq!(tokenizer.decode(&ids).unwrap(), "ab é!\n");
        let again = TextTokenizer::load(&out).unwrap();
        assert!(again.is_characters() && again.hash() == tokenizer.hash());
        let err = tokenizer.encode("a Zbz").unwrap_err().to_string();
        assert!(
            err.contains("2 character(s)") && err.contains("'Z', 'z'"),
            "{err}"
        );
        std::fs::remove_file(&out).ok();
    }

    #[test]
    fn fnv1a_matches_its_published_test_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
