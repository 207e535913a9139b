//! A GGUF file alone is a pretrained model: its metadata gives the tokenizer (the same ids and
//! text as the model's `tokenizer.json`, the same special tokens), `--init-from` trains from it
//! and the run keeps its tokenizer, chat template and special ids, which exports carry;
//! `generate`, `eval` and `export` take it where they take a model directory, and `plan` refuses
//! a file whose shape or tensors do not fit before planning, naming the key or the tensor.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::tiny::{corpus, shards, tiny_smollm2, train_two_steps};
use common::{TempDir, assert_mentions, fails, headroom, succeeds, text};
use headroom_trainer::data::tokenizer::TextTokenizer;
use serde_json::Value;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn/tests/data")
}

fn gguf(case: &str) -> PathBuf {
    data().join("gguf").join(format!("{case}.gguf"))
}

/// Texts that exercise the pre-tokenizers: digits, spaces, newlines, punctuation, contractions,
/// special tokens, characters beyond ASCII.
const TEXTS: [&str; 7] = [
    "the quick brown fox 12345 jumps over 7 lazy dogs!",
    "  two spaces,\n\nnewlines\r\nand\ttabs   ",
    "it's the dog's, they're here, we'll see",
    "<|im_start|>user\nhello there<|im_end|>\n<|endoftext|>",
    "naïve café, ünïcode ✓ 日本語 🦊",
    "",
    "x",
];

/// The added tokens of a tokenizer's JSON: id, text, and whether special.
fn added_tokens(tokenizer: &TextTokenizer) -> Vec<(u64, String, bool)> {
    let json: Value = serde_json::from_slice(tokenizer.json()).unwrap();
    let mut tokens: Vec<_> = json["added_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let content = t["content"].as_str().unwrap().to_owned();
            (t["id"].as_u64().unwrap(), content, t["special"] == true)
        })
        .collect();
    tokens.sort();
    tokens
}

/// Every token of a `tokenizer.json`, by id: the model's vocabulary and the added tokens (which
/// a tokenizer.json may hold beside the vocabulary, and a GGUF file's token list holds in it).
fn every_token(json: &Value) -> BTreeMap<u64, String> {
    let vocab = json["model"]["vocab"].as_object().unwrap();
    let model = vocab
        .iter()
        .map(|(t, id)| (id.as_u64().unwrap(), t.clone()));
    let added = json["added_tokens"].as_array().unwrap().iter().map(|t| {
        let content = t["content"].as_str().unwrap().to_owned();
        (t["id"].as_u64().unwrap(), content)
    });
    model.chain(added).collect()
}

#[test]
fn a_gguf_files_tokenizer_is_the_tokenizer_json_it_was_written_from() {
    for case in ["tiny-smollm2", "tiny-llama3"] {
        let ours = TextTokenizer::load(&gguf(case)).unwrap();
        let theirs = TextTokenizer::load(&data().join(case)).unwrap();
        assert_eq!(ours.vocab(), theirs.vocab(), "{case}");
        for text in TEXTS {
            let ids = ours.encode(text).unwrap();
            assert_eq!(ids, theirs.encode(text).unwrap(), "{case}: {text:?}");
            let document = ours.encode_document(text).unwrap();
            assert_eq!(document, theirs.encode_document(text).unwrap(), "{case}");
            assert_eq!(ours.decode(&ids).unwrap(), text, "{case}");
            assert_eq!(
                ours.decode(&document).unwrap(),
                theirs.decode(&document).unwrap()
            );
        }
        assert_eq!(ours.end_of_text(), theirs.end_of_text(), "{case}");
        assert_eq!(ours.begin_of_text(), theirs.begin_of_text(), "{case}");
        assert_eq!(ours.stops(), theirs.stops(), "{case}");
        assert_eq!(added_tokens(&ours), added_tokens(&theirs), "{case}");
        // Split, joined and wrapped as the tokenizer.json says, over the same vocabulary and
        // merges.
        let (a, b): (Value, Value) = (
            serde_json::from_slice(ours.json()).unwrap(),
            serde_json::from_slice(theirs.json()).unwrap(),
        );
        for part in ["normalizer", "pre_tokenizer", "post_processor", "decoder"] {
            assert_eq!(a[part], b[part], "{case}: {part}");
        }
        for part in ["type", "merges", "byte_fallback", "unk_token"] {
            assert_eq!(a["model"][part], b["model"][part], "{case}: model.{part}");
        }
        assert_eq!(every_token(&a), every_token(&b), "{case}: the tokens");
        // Known by the tokenizer.json it is written as, the same every time.
        let again = TextTokenizer::load(&gguf(case)).unwrap();
        assert_eq!((ours.hash(), ours.json()), (again.hash(), again.json()));
    }
    let llama3 = TextTokenizer::load(&gguf("tiny-llama3")).unwrap();
    assert_eq!(
        llama3.encode_document("hi").unwrap()[0],
        318,
        "<|begin_of_text|> first"
    );
}

#[test]
fn a_file_without_a_byte_level_tokenizer_is_refused_naming_the_key() {
    // The tiny Qwen2's file holds placeholder tokens and no merges.
    let err = TextTokenizer::load(&gguf("tiny-qwen2"))
        .unwrap_err()
        .to_string();
    assert_mentions(&err, &["tiny-qwen2.gguf", "tokenizer.ggml.merges"]);
}

/// Shards of a fresh corpus in `dir`, tokenized by the tiny SmolLM2 GGUF file's tokenizer.
fn gguf_shards(dir: &Path) -> PathBuf {
    let tokenizer = TextTokenizer::load(&gguf("tiny-smollm2")).unwrap();
    let corpus = corpus(dir, "corpus", 5);
    shards(&tokenizer, &corpus, dir.join("shards"))
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn a_run_from_a_gguf_file_keeps_its_identity_and_exports_carry_it() {
    let dir = TempDir::new("gguf-identity");
    let prepared = gguf_shards(&dir.0);
    let base = gguf("tiny-smollm2");
    let template = "{% for message in messages %}";
    for (kind, flags) in [
        ("full", &[][..]),
        ("qlora", &["--lora", "--base", "nf4"][..]),
    ] {
        let run = dir.0.join(kind);
        train_two_steps(&base, &prepared, &run, flags);
        let tokenizer = TextTokenizer::load(&run).unwrap();
        assert_eq!(tokenizer.json(), TextTokenizer::load(&base).unwrap().json());
        let chat = std::fs::read_to_string(run.join("chat_template.jinja")).unwrap();
        assert!(chat.starts_with(template), "{chat}");
        let config = read_json(&run.join("tokenizer_config.json"));
        assert_eq!(config["eos_token"], "<|endoftext|>", "{config}");
        assert_eq!(config["add_bos_token"], false, "{config}");
        let out = dir.0.join(format!("{kind}-export"));
        let mut args = vec!["export", "--hf", text(&run), text(&out)];
        if kind == "qlora" {
            args.push("--merge");
        }
        let said = succeeds(&headroom(&args));
        assert_mentions(&said, &["tokenizer.json", "chat_template.jinja"]);
        let exported = std::fs::read_to_string(out.join("chat_template.jinja")).unwrap();
        assert_eq!(exported, chat);
        let config = read_json(&out.join("config.json"));
        assert_eq!(
            (&config["bos_token_id"], &config["eos_token_id"]),
            (&0.into(), &0.into())
        );
    }
    // Shards of the tokenizer.json it was written from are another tokenizer's: refused,
    // naming the file to prepare them with.
    let other = shards(
        &TextTokenizer::load(&tiny_smollm2()).unwrap(),
        &corpus(&dir.0, "other", 6),
        dir.0.join("other-shards"),
    );
    let err = fails(&headroom(&[
        "train",
        "--init-from",
        text(&base),
        "--data",
        "token-shards",
        "--data-path",
        text(&other),
        "--steps",
        "1",
        "--run-dir",
        text(&dir.0.join("refused")),
    ]));
    assert_mentions(&err, &["--tokenizer", "tiny-smollm2.gguf"]);
}

/// `headroom generate` of `model`, greedy, from `prompt`: what it printed.
fn generate(model: &Path, prompt: &str) -> String {
    succeeds(&headroom(&[
        "generate",
        "--checkpoint",
        text(model),
        "--prompt",
        prompt,
        "--temperature",
        "0",
        "--max-tokens",
        "12",
    ]))
}

#[test]
fn a_gguf_file_is_used_where_a_model_directory_is() {
    let dir = TempDir::new("gguf-use");
    let base = gguf("tiny-smollm2");
    for prompt in ["the fox", "12 dogs", "<|im_start|>user\nhi<|im_end|>\n"] {
        assert_eq!(generate(&base, prompt), generate(&tiny_smollm2(), prompt));
    }
    let shards = gguf_shards(&dir.0);
    let evaluated = succeeds(&headroom(&[
        "eval",
        "--checkpoint",
        text(&base),
        "--data",
        text(&shards),
    ]));
    assert!(evaluated.contains("held-out loss"), "{evaluated}");
    let message = fails(&headroom(&["eval", "--checkpoint", text(&base)]));
    assert_mentions(&message, &["GGUF", "--data"]);
    // Written as a Hugging Face directory, it is the model its safetensors hold, with its
    // tokenizer and chat template.
    let out = dir.0.join("exported");
    let said = succeeds(&headroom(&["export", "--hf", text(&base), text(&out)]));
    assert_mentions(&said, &["tokenizer.json", "chat_template.jinja"]);
    assert_eq!(
        common::tiny::hf_tensors(&out),
        common::tiny::hf_tensors(&tiny_smollm2())
    );
    assert_eq!(generate(&out, "the fox"), generate(&base, "the fox"));
}

/// A copy of the tiny SmolLM2's file under `dir` with the first `from` replaced by `to`.
fn renamed(dir: &Path, from: &str, to: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let mut bytes = std::fs::read(gguf("tiny-smollm2")).unwrap();
    let at = bytes
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .unwrap();
    bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
    let out = dir.join("edited.gguf");
    std::fs::write(&out, bytes).unwrap();
    out
}

#[test]
fn a_gguf_file_that_does_not_fit_is_refused_before_planning() {
    let dir = TempDir::new("gguf-plan");
    let plan = |init_from: &Path, more: &[&str]| {
        let mut args = vec![
            "plan",
            "--init-from",
            text(init_from),
            "--data",
            "uniform-tokens",
            "--batch-size",
            "2",
        ];
        args.extend(more);
        headroom(&args)
    };
    succeeds(&plan(&gguf("tiny-smollm2"), &["--context", "16"]));
    std::fs::create_dir_all(&dir.0).unwrap();
    let file = dir.0.join("run.toml");
    std::fs::write(&file, "[model]\nlayers = 3\n").unwrap();
    let err = fails(&plan(
        &gguf("tiny-smollm2"),
        &["--config", text(&file), "--context", "16"],
    ));
    assert_mentions(
        &err,
        &["model.layers = 3", "llama.block_count", "tiny-smollm2.gguf"],
    );
    let err = fails(&plan(&gguf("tiny-smollm2"), &["--context", "128"]));
    assert_mentions(&err, &["model.context = 128", "llama.context_length"]);
    let missing = renamed(&dir.0, "blk.1.ffn_up.weight", "blk.1.ffn_uq.weight");
    let err = fails(&plan(&missing, &["--context", "16"]));
    assert_mentions(
        &err,
        &["edited.gguf", "tensor `blk.1.ffn_up.weight`: missing"],
    );
    let err = fails(&plan(&dir.0.join("absent.gguf"), &["--context", "16"]));
    assert_mentions(&err, &["model.init_from", "absent.gguf", "no such file"]);
}
