//! Instruction data: conversations rendered with the tiny SmolLM2's chat template, their
//! scored tokens as transformers marks them, prepared into shards all or nothing, read as
//! packed or padded windows, trained on, judged and chatted with.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{TempDir, assert_mentions, fails, headroom, succeeds, text};
use headroom_autograd::Tensor;
use headroom_kernels::{DType, Device, DeviceConfig};
use headroom_nn::hf::Pretrained;
use headroom_nn::{Gpt, GptConfig, Initializer};
use headroom_trainer::data::chat::{ChatEncoder, Conversation, Packing, Score, TemplateSource};
use headroom_trainer::data::tokenizer::TextTokenizer;
use headroom_trainer::data::{
    ChatShards, Dataset, HostBatch, IGNORE, INPUTS, Loader, Position, STARTS, TARGETS, Values,
};
use headroom_trainer::model::TrainModel;
use serde_json::Value;

fn gguf() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn/tests/data/gguf/tiny-smollm2.gguf")
}

fn fixture() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/chat_masks.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The ids and mask of each fixture conversation, encoded with `source`.
fn encoded(source: TemplateSource) -> Vec<(String, Vec<u32>, Vec<u8>)> {
    let tokenizer = TextTokenizer::load(&gguf()).unwrap();
    let encoder = ChatEncoder::new(source, &tokenizer, Score::Assistant).unwrap();
    let fixture = fixture();
    let lines = fixture["conversations"].as_array().unwrap();
    lines
        .iter()
        .map(|line| {
            let conversation = Conversation::parse(&line.to_string()).unwrap();
            let chat = encoder.encode(&conversation).unwrap();
            let mask = chat.scored.iter().map(|&s| u8::from(s)).collect();
            (chat.text, chat.ids, mask)
        })
        .collect()
}

fn expected() -> Vec<(String, Vec<u32>, Vec<u8>)> {
    let fixture = fixture();
    let numbers = |v: &Value| -> Vec<u64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    fixture["expected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let ids = numbers(&e["ids"]).into_iter().map(|x| x as u32).collect();
            let mask = numbers(&e["mask"]).into_iter().map(|x| x as u8).collect();
            (e["text"].as_str().unwrap().to_owned(), ids, mask)
        })
        .collect()
}

#[test]
fn the_scored_tokens_are_those_transformers_marks_with_and_without_generation_blocks() {
    let source = TemplateSource::find(&gguf()).unwrap();
    assert_eq!(encoded(source.clone()), expected());
    // The same template with {% generation %} blocks, as scripts/chat/check_mask.py adds them.
    let plain = "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' \
                 + '\n'}}";
    assert!(source.source.contains(plain));
    let tagged = "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}\
                  {% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}\
                  {{ '\n' }}{% else %}"
        .to_owned()
        + plain
        + "{% endif %}";
    let source = TemplateSource {
        source: source.source.replace(plain, &tagged),
        ..source
    };
    assert_eq!(encoded(source), expected());
}

/// A JSON Lines file of `count` short conversations, `seed` varying their words.
fn conversations(path: &Path, count: usize, seed: usize) {
    let mut text = String::new();
    for i in 0..count {
        let n = i + seed;
        let line = match i % 3 {
            0 => serde_json::json!({"messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": format!("add {n} and {}", n + 1)},
                {"role": "assistant", "content": format!("{}", 2 * n + 1)},
            ]}),
            1 => serde_json::json!({"prompt": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": format!("twice {n}?")}],
                "completion": [{"role": "assistant", "content": format!("{}", 2 * n)}]}),
            _ => serde_json::json!({"messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": format!("hello {n}")},
                {"role": "user", "content": "bye"},
                {"role": "assistant", "content": "bye"},
            ]}),
        };
        text.push_str(&format!("{line}\n"));
        if i == 1 {
            text.push('\n');
        }
    }
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// `headroom prepare --chat` of `inputs` into `out`, with `flags`.
fn prepare(inputs: &Path, out: &Path, flags: &[&str]) -> std::process::Output {
    let model = gguf();
    let mut args = vec![
        "prepare",
        "--chat",
        text(inputs),
        "--tokenizer",
        text(&model),
        "--out",
        text(out),
        "--quiet",
    ];
    args.extend(flags);
    headroom(&args)
}

/// The chat shards of a fresh corpus in `dir`.
fn chat_shards(dir: &Path) -> PathBuf {
    for (file, count) in [("a.jsonl", 24), ("b.jsonl", 9), ("c.jsonl", 9)] {
        conversations(&dir.join("chats").join(file), count, count);
    }
    let out = dir.join("shards");
    let said = succeeds(&prepare(&dir.join("chats"), &out, &["--held-out", "0.3"]));
    assert_mentions(&said, &["training conversations", "scored tokens"]);
    out
}

#[test]
fn a_lone_file_is_split_between_two_conversations() {
    let dir = TempDir::new("chat-lone");
    let file = dir.0.join("one.jsonl");
    conversations(&file, 40, 0);
    let out = dir.0.join("shards");
    succeeds(&prepare(&file, &out, &[]));
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let count = |side: &str| manifest[side][0]["documents"].as_u64().unwrap();
    assert_eq!((count("train"), count("held_out")), (39, 1), "{manifest}");
}

#[test]
fn a_bad_line_names_its_file_and_line_and_changes_nothing() {
    let dir = TempDir::new("chat-prepare");
    let out = chat_shards(&dir.0);
    let manifest = std::fs::read(out.join("manifest.json")).unwrap();
    let parsed: Value = serde_json::from_slice(&manifest).unwrap();
    assert_eq!(parsed["chat"]["scored"], "assistant", "{parsed}");
    let bad = dir.0.join("chats/d.jsonl");
    let cases = [
        ("{\"messages\": [", "not JSON"),
        (
            r#"{"messages": [{"role": "user", "content": "x"}]}"#,
            "no assistant turn",
        ),
        (
            r#"{"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}]}"#,
            "\"tool\"",
        ),
    ];
    for (line, why) in cases {
        let ok = r#"{"prompt": "a", "completion": "b"}"#;
        std::fs::write(&bad, format!("{ok}\n\n{line}\n")).unwrap();
        let err = fails(&prepare(&dir.0.join("chats"), &out, &[]));
        assert_mentions(&err, &["d.jsonl:3:", why]);
        assert_eq!(std::fs::read(out.join("manifest.json")).unwrap(), manifest);
        assert!(!out.join(".unfinished").exists());
    }
    // A role the template refuses (raise_exception) is an error naming the line too.
    let template = dir.0.join("no-system.jinja");
    std::fs::write(
        &template,
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system \
         messages') }}{% endif %}{{ m.content }}{% endfor %}",
    )
    .unwrap();
    std::fs::remove_file(&bad).unwrap();
    let err = fails(&prepare(
        &dir.0.join("chats"),
        &out,
        &["--chat-template", text(&template)],
    ));
    assert_mentions(&err, &[":1:", "refuses it: no system messages"]);
    assert_eq!(std::fs::read(out.join("manifest.json")).unwrap(), manifest);
}

/// The window of the dataset tests: several short conversations fit in it.
const WINDOW: usize = 160;

#[test]
fn packed_windows_carry_where_each_conversation_starts_through_the_loader() {
    let dir = TempDir::new("chat-windows");
    let out = chat_shards(&dir.0);
    let (train, eval) = ChatShards::open(&out, WINDOW, 4, Packing::Packed).unwrap();
    assert!(train.shape().has_starts() && !eval.shape().has_starts());
    assert!(train.len() < train.conversations(), "several a window");
    let (padded, _) = ChatShards::open(&out, WINDOW, 4, Packing::OneEach).unwrap();
    assert_eq!(padded.len(), padded.conversations());
    let mut loader = Loader::new(Arc::new(train.clone()), 3, 7, 2, Position::default());
    let (_, batch) = loader.next_batch().unwrap();
    let batch = batch.unwrap();
    let starts = batch.array(STARTS).and_then(Values::as_u32).unwrap();
    let targets = batch.array(TARGETS).and_then(Values::as_u32).unwrap();
    assert_eq!(starts.len(), 3 * WINDOW);
    let mut began = 0;
    for (window_starts, window_targets) in starts.chunks(WINDOW).zip(targets.chunks(WINDOW)) {
        for i in 0..WINDOW {
            let start = window_starts[i] as usize;
            assert!(start <= i && window_starts[start] as usize == start);
            began += usize::from(start == i);
            // A target never reaches into the next conversation.
            if window_targets[i] != IGNORE {
                assert_eq!(window_starts[i + 1], window_starts[i]);
            }
        }
    }
    assert!(began > 3, "several conversations begin in the windows");
    let cpu = Device::cpu(DeviceConfig::new(1 << 24)).unwrap();
    let on_device = batch.to_device(&cpu).unwrap();
    assert_eq!(on_device.starts().unwrap().dims(), [3, WINDOW]);
    let whole = HostBatch::collect(&train, &[0]).unwrap();
    assert!(whole.scored() > 0);
}

#[test]
fn a_packed_window_trains_as_its_conversations_one_at_a_time() {
    let dir = TempDir::new("chat-packed-loss");
    let (train, _) = ChatShards::open(&chat_shards(&dir.0), WINDOW, 4, Packing::Packed).unwrap();
    let batch = HostBatch::collect(&train, &[0]).unwrap();
    let u32s = |name| batch.array(name).and_then(Values::as_u32).unwrap().to_vec();
    let (ids, targets, starts) = (u32s(INPUTS), u32s(TARGETS), u32s(STARTS));
    let cpu = Device::cpu(DeviceConfig::new(1 << 28)).unwrap();
    // The tiny SmolLM2's shape with random weights, over a window longer than its context.
    let config = GptConfig {
        context: WINDOW,
        ..Pretrained::read(&gguf()).unwrap().gpt_config(0.0)
    };
    let gpt = Gpt::new(&mut Initializer::new(&cpu, DType::F32, 1), config).unwrap();
    let model = TrainModel::Gpt(Box::new(gpt));
    let tensor = |values: &[u32]| Tensor::from_host(&cpu, [1, values.len()], values).unwrap();
    let loss = |ids: &[u32], targets: &[u32], starts: Option<&[u32]>| {
        let starts = starts.map(tensor);
        let loss = model.loss(&tensor(ids), &tensor(targets), starts.as_ref());
        loss.unwrap().to_f64().unwrap()[0]
    };
    // Each conversation alone, its loss weighted by its scored tokens.
    let (mut sum, mut scored, mut conversations) = (0.0, 0, 0);
    let mut begin = 0;
    while begin < WINDOW {
        let end = (begin..WINDOW)
            .find(|&i| starts[i] as usize != begin)
            .unwrap_or(WINDOW);
        let count = targets[begin..end].iter().filter(|&&t| t != IGNORE).count();
        if count > 0 {
            sum += loss(&ids[begin..end], &targets[begin..end], None) * count as f64;
            scored += count;
            conversations += 1;
        }
        begin = end;
    }
    assert!(conversations > 1, "the window packs several conversations");
    let alone = sum / scored as f64;
    let packed = loss(&ids, &targets, Some(&starts));
    assert!(
        (packed - alone).abs() < 1e-5 * alone,
        "packed {packed}, alone {alone}"
    );
    // Without the starts, later conversations see the earlier ones.
    assert!((loss(&ids, &targets, None) - alone).abs() > 1e-4);
}

/// Trains the tiny SmolLM2 GGUF on chat shards for two steps into `run`, with `flags`.
fn train(shards: &Path, run: &Path, flags: &[&str]) -> String {
    let model = gguf();
    let mut args = vec![
        "train",
        "--init-from",
        text(&model),
        "--data",
        "token-shards",
        "--data-path",
        text(shards),
        "--context",
        "64",
        "--batch-size",
        "2",
        "--steps",
        "2",
        "--eval-every",
        "0",
        "--eval-size",
        "4",
        "--memory-limit",
        "256MiB",
        "--run-dir",
        text(run),
        "--quiet",
    ];
    args.extend(flags);
    let output = headroom(&args);
    succeeds(&output);
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn chat_data_trains_is_judged_on_scored_tokens_and_answers_a_message() {
    let dir = TempDir::new("chat-train");
    let shards = chat_shards(&dir.0);
    let run = dir.0.join("padded");
    train(&shards, &run, &["--no-packing"]);
    let judged = succeeds(&headroom(&["eval", "--checkpoint", text(&run)]));
    assert_mentions(&judged, &["loss on scored tokens (the assistant's)"]);
    // A published model is judged in windows of the length asked, within its context.
    let model = gguf();
    let judge = |context: &str| {
        let args = [
            "eval",
            "--checkpoint",
            text(&model),
            "--data",
            text(&shards),
        ];
        headroom(&[&args[..], &["--context", context]].concat())
    };
    assert_mentions(&succeeds(&judge("60")), &["loss on scored tokens"]);
    assert_mentions(
        &fails(&judge("65")),
        &["windows of 65 tokens", "at most 64"],
    );
    train(&shards, &dir.0.join("packed"), &[]);
    // The answer alone, as the rendered prompt continues it, stopping at the end of the turn.
    let chat = succeeds(&headroom(&[
        "generate",
        "--checkpoint",
        text(&gguf()),
        "--chat",
        "hi",
        "--system",
        "Be brief.",
        "--temperature",
        "0",
        "--max-tokens",
        "6",
    ]));
    let rendered = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n\
                    <|im_start|>assistant\n";
    let continued = succeeds(&headroom(&[
        "generate",
        "--checkpoint",
        text(&gguf()),
        "--prompt",
        rendered,
        "--temperature",
        "0",
        "--max-tokens",
        "6",
    ]));
    assert_eq!(Some(chat.as_str()), continued.strip_prefix(rendered));
}
