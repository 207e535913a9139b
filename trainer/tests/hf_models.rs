//! A downloaded Hugging Face model is a first-class input, and a fine-tuned model leaves as the
//! model it came from: `generate`, `eval` and `export` take a model directory or a Hub id in
//! the local cache where they take a run directory; a run and its exports carry the base's
//! tokenizer and generation files and its special token ids; generation stops at the model's
//! end-of-sequence ids; and a model opened for use holds its weights once.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::tiny::{shards, tiny_smollm2, train_two_steps};
use common::{TempDir, assert_mentions, fails, headroom, succeeds, text};
use headroom_nn::Module;
use headroom_trainer::data::tokenizer::TextTokenizer;
use headroom_trainer::model::TrainModel;
use headroom_trainer::trained::{SavedRun, UseSettings};
use serde_json::{Value, json};

/// A chat template as transformers saves it beside a model.
const CHAT_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] \
    + '\n' + message['content'] + '<|im_end|>\n' }}{% endfor %}";

/// The tiny SmolLM2 in `dir/name` as a published instruct model is: its tokenizer's settings,
/// a chat template, and special ids of its own (`eos` in both files, a list in the generation
/// defaults where it has several).
fn base_with_identity(dir: &Path, name: &str, eos: &[u64]) -> PathBuf {
    let base = dir.join(name);
    std::fs::create_dir_all(&base).unwrap();
    for file in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(tiny_smollm2().join(file), base.join(file)).unwrap();
    }
    let mut config = read_json(&tiny_smollm2().join("config.json"));
    config["bos_token_id"] = json!(1);
    config["eos_token_id"] = json!(eos[0]);
    config["pad_token_id"] = json!(eos[0]);
    write_json(&base.join("config.json"), &config);
    let eos_ids = match eos {
        [one] => json!(one),
        many => json!(many),
    };
    let generation = json!({"bos_token_id": 1, "eos_token_id": eos_ids, "do_sample": true,
        "temperature": 0.2});
    write_json(&base.join("generation_config.json"), &generation);
    let tokenizer = json!({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
        "pad_token": "<|im_end|>", "tokenizer_class": "GPT2Tokenizer",
        "model_max_length": 64});
    write_json(&base.join("tokenizer_config.json"), &tokenizer);
    std::fs::write(base.join("chat_template.jinja"), CHAT_TEMPLATE).unwrap();
    base
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
}

/// Shards of a fresh corpus in `dir`, tokenized by the tiny SmolLM2's tokenizer.
fn smollm2_shards(dir: &Path) -> PathBuf {
    let tokenizer = TextTokenizer::load(&tiny_smollm2()).unwrap();
    let corpus = common::tiny::corpus(dir, "corpus", 5);
    shards(&tokenizer, &corpus, dir.join("shards"))
}

/// `headroom generate` of `model`, greedy, from `prompt`: standard output and error.
fn generate(model: &str, prompt: &str, tokens: &str, env: &[(&str, &Path)]) -> (String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_headroom"));
    command.args(["generate", "--checkpoint", model, "--prompt", prompt]);
    command.args(["--temperature", "0", "--max-tokens", tokens]);
    command.env("HEADROOM_LOG", "info");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    let stdout = succeeds(&output);
    (stdout, String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn a_hugging_face_directory_is_used_where_a_run_directory_is() {
    let dir = TempDir::new("hf-model-use");
    let shards = smollm2_shards(&dir.0);
    let tiny = tiny_smollm2();
    let model = text(&tiny);
    let (generated, _) = generate(model, "the fox", "8", &[]);
    assert!(generated.starts_with("the fox"), "{generated}");
    // Evaluated on shards of its tokenizer, as a run's model would be; nothing written beside
    // the downloaded model.
    let evaluated = succeeds(&headroom(&[
        "eval",
        "--checkpoint",
        model,
        "--data",
        text(&shards),
    ]));
    assert!(evaluated.contains("held-out loss"), "{evaluated}");
    assert!(!tiny_smollm2().join("eval.json").exists());
    let message = fails(&headroom(&["eval", "--checkpoint", model]));
    assert_mentions(&message, &["Hugging Face model", "--data"]);
    // Written again, it is the same model.
    let out = dir.0.join("again");
    succeeds(&headroom(&["export", "--hf", model, text(&out)]));
    assert_eq!(
        common::tiny::hf_tensors(&out),
        common::tiny::hf_tensors(&tiny_smollm2())
    );
    // A Hub id is found in the local cache, snapshot and all.
    let cache = dir.0.join("hub");
    let entry = cache.join("models--tiny-org--tiny-smollm2");
    let snapshot = entry.join("snapshots").join("0123abc");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(entry.join("refs")).unwrap();
    std::fs::write(entry.join("refs").join("main"), "0123abc").unwrap();
    for file in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(tiny_smollm2().join(file), snapshot.join(file)).unwrap();
    }
    let (cached, _) = generate(
        "tiny-org/tiny-smollm2",
        "the fox",
        "8",
        &[("HF_HUB_CACHE", &cache)],
    );
    assert_eq!(cached, generated);
}

#[test]
fn a_run_and_its_exports_keep_the_base_models_identity() {
    let dir = TempDir::new("hf-identity");
    let shards = smollm2_shards(&dir.0);
    let base = base_with_identity(&dir.0, "base", &[2]);
    let carried = [
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    ];
    for (kind, flags) in [("full", &[][..]), ("lora", &["--lora"][..])] {
        let run = dir.0.join(kind);
        train_two_steps(&base, &shards, &run, flags);
        for file in carried {
            assert_eq!(
                std::fs::read(run.join(file)).unwrap(),
                std::fs::read(base.join(file)).unwrap(),
                "{kind}: the run's {file}"
            );
        }
        for merge in [false, true] {
            if merge && kind == "full" {
                continue;
            }
            let out = dir.0.join(format!("{kind}-{merge}"));
            let mut args = vec!["export", "--hf", text(&run), text(&out)];
            if merge {
                args.push("--merge");
            }
            let said = succeeds(&headroom(&args));
            assert_mentions(&said, &["tokenizer_config.json", "chat_template.jinja"]);
            for file in carried {
                assert_eq!(
                    std::fs::read(out.join(file)).unwrap(),
                    std::fs::read(base.join(file)).unwrap(),
                    "{kind}, merged {merge}: {file}"
                );
            }
            let generation = read_json(&out.join("generation_config.json"));
            assert_eq!(
                generation["temperature"],
                json!(0.2),
                "{kind}: {generation}"
            );
            assert_eq!(generation["eos_token_id"], json!(2), "{kind}: {generation}");
            if !out.join("config.json").exists() {
                assert!(out.join("adapter_config.json").exists(), "{kind}: adapters");
                continue;
            }
            let config = read_json(&out.join("config.json"));
            let ids = [
                &config["bos_token_id"],
                &config["eos_token_id"],
                &config["pad_token_id"],
            ];
            assert_eq!(ids, [&json!(1), &json!(2), &json!(2)], "{kind}: {config}");
        }
    }
}

#[test]
fn generation_stops_at_any_of_the_models_end_of_sequence_ids() {
    let dir = TempDir::new("hf-stops");
    // The id greedy generation gives first, made one of the model's ends of sequence.
    let prompt = "the fox";
    let run = SavedRun::open(
        &tiny_smollm2(),
        &UseSettings {
            device: Some("cpu".into()),
            memory_limit: None,
        },
        None,
    )
    .unwrap();
    let TrainModel::Gpt(gpt) = &run.model else {
        panic!("a GPT")
    };
    let tokenizer = TextTokenizer::load(&tiny_smollm2()).unwrap();
    let ids = tokenizer.encode_document(prompt).unwrap();
    let input = headroom_autograd::Tensor::from_host(&run.device, [1, ids.len()], &ids).unwrap();
    let logits = gpt.forward(&input).unwrap().to_f64().unwrap();
    let last = &logits[logits.len() - gpt.config().vocab..];
    let first = (0..last.len()).fold(0, |best, i| if last[i] > last[best] { i } else { best });
    let base = base_with_identity(&dir.0, "base", &[7, first as u64]);
    let (generated, log) = generate(text(&base), prompt, "8", &[]);
    assert_eq!(generated.trim_end(), prompt, "{log}");
    assert!(log.contains("the model ended the text"), "{log}");
}

#[test]
fn a_model_opened_for_use_holds_its_weights_once() {
    let dir = TempDir::new("hf-weights-once");
    let shards = smollm2_shards(&dir.0);
    let full = dir.0.join("full");
    train_two_steps(&tiny_smollm2(), &shards, &full, &[]);
    let lora = dir.0.join("lora-bf16");
    train_two_steps(
        &tiny_smollm2(),
        &shards,
        &lora,
        &["--lora", "--param-dtype", "bf16"],
    );
    let settings = UseSettings {
        device: Some("cpu".into()),
        memory_limit: None,
    };
    for model in [tiny_smollm2(), full, lora] {
        let opened = SavedRun::open(&model, &settings, None).unwrap();
        let stats = opened.device.allocator().stats();
        let mut tensors = 0;
        opened.model.module().visit(&mut |_, _| tensors += 1);
        let (weights, peak) = (stats.in_use as usize, stats.peak_in_use as usize);
        // Each weight is loaded into the memory the model was built with: beyond the weights
        // held now, nothing ever took more than a granule (256 bytes) a tensor.
        let rounding = 256 * tensors;
        assert!(
            peak <= weights + rounding,
            "{}: a peak of {peak} bytes for {weights} bytes of weights",
            model.display()
        );
    }
}
