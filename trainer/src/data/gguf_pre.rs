//! llama.cpp's names of byte-level BPE pre-tokenizers (a GGUF file's `tokenizer.ggml.pre`),
//! each as the Hugging Face `tokenizer.json` of the models that use it configures its
//! normalizer and pre-tokenizer, so that text splits into the pieces the merges were learned on.

use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::tokenizer::SplitDelimiterBehavior;

/// Llama 3's split (its `tokenizer.json`'s, and llama.cpp's `llama-bpe`): contractions, words
/// with one leading non-letter, numbers of up to three digits, punctuation runs, newlines.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split: Llama 3's with one digit a piece.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The names mapped here, for messages.
pub const KNOWN: &str =
    "default, gpt-2, gpt2, smollm, llama-bpe, llama3, llama-v3, qwen2, deepseek-r1-qwen";

/// How a pre-tokenizer named by llama.cpp splits text.
pub struct PreTokenization {
    /// The normalizer before it (Qwen2's NFC), if any.
    pub normalizer: Option<NormalizerWrapper>,
    /// The pre-tokenizer.
    pub pre_tokenizer: PreTokenizerWrapper,
    /// Whether a piece that is a token of the vocabulary is taken whole, before any merge
    /// (Llama 3's `ignore_merges`, as llama.cpp's `llama-bpe` does).
    pub ignore_merges: bool,
    /// Whether the beginning-of-sequence token is added where the file does not say
    /// (`tokenizer.ggml.add_bos_token`): llama.cpp adds it for Llama 3's.
    pub add_bos: bool,
}

/// The configuration of llama.cpp's pre-tokenizer `name` (`tokenizer.ggml.pre`; `default` where
/// a file names none); `None` for a name not mapped here ([`KNOWN`] lists them).
pub fn pre_tokenization(name: &str) -> Option<PreTokenization> {
    // GPT-2's byte-level pieces, its regular expression included.
    let gpt2 = ByteLevel::new(false, true, true);
    let plain = |pre_tokenizer: PreTokenizerWrapper| PreTokenization {
        normalizer: None,
        pre_tokenizer,
        ignore_merges: false,
        add_bos: false,
    };
    let split = |pattern: &str| {
        let pattern = SplitPattern::Regex(pattern.to_owned());
        Split::new(pattern, SplitDelimiterBehavior::Isolated, false).ok()
    };
    Some(match name {
        "default" | "gpt-2" | "gpt2" => plain(gpt2.into()),
        // SmolLM2's: each digit apart, then GPT-2's pieces.
        "smollm" => plain(Sequence::new(vec![Digits::new(true).into(), gpt2.into()]).into()),
        "llama-bpe" | "llama3" | "llama-v3" => PreTokenization {
            ignore_merges: true,
            add_bos: true,
            ..plain(
                Sequence::new(vec![
                    split(LLAMA3_SPLIT)?.into(),
                    ByteLevel::new(false, true, false).into(),
                ])
                .into(),
            )
        },
        "qwen2" | "deepseek-r1-qwen" => PreTokenization {
            normalizer: Some(NFC.into()),
            ..plain(
                Sequence::new(vec![
                    split(QWEN2_SPLIT)?.into(),
                    ByteLevel::new(false, false, false).into(),
                ])
                .into(),
            )
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_name_is_mapped_and_others_are_not() {
        for name in KNOWN.split(", ") {
            assert!(pre_tokenization(name).is_some(), "{name}");
        }
        assert!(pre_tokenization("falcon").is_none());
        assert!(pre_tokenization("qwen2").unwrap().normalizer.is_some());
        assert!(pre_tokenization("llama-bpe").unwrap().ignore_merges);
        assert!(!pre_tokenization("smollm").unwrap().ignore_merges);
        assert!(pre_tokenization("llama3").unwrap().add_bos);
        assert!(!pre_tokenization("gpt-2").unwrap().add_bos);
    }

    #[test]
    fn qwen2_splits_as_its_tokenizer_json_says() {
        // Qwen2.5's tokenizer.json, as published.
        let published = serde_json::json!({
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated",
                    "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
                    "use_regex": false}
            ]}
        });
        let qwen2 = pre_tokenization("qwen2").unwrap();
        let ours = serde_json::json!({
            "normalizer": serde_json::to_value(qwen2.normalizer).unwrap(),
            "pre_tokenizer": serde_json::to_value(qwen2.pre_tokenizer).unwrap(),
        });
        assert_eq!(ours, published);
    }
}
