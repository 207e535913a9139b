//! A trained run's model used, as a user relies on it: `headroom eval` (loss, perplexity and
//! their JSON), generation (`generate` with its key/value cache, and `headroom generate`), and
//! `headroom export --hf` back into `--init-from`. The runs start from the tiny GPT-2 made with
//! transformers (nn/tests/data/tiny-gpt2) and train a few steps.
//!
//! Set `HEADROOM_KEEP_HF_EXPORT=DIR` to keep a trained run's export in `DIR` with an
//! `expected.json` of Headroom's logits for it, for `scripts/hf/check_export.py DIR
//! DIR/expected.json` (transformers must compute the same).

mod common;

use std::path::{Path, PathBuf};

use common::tiny::{
    configured, corpus, export, run_config, shards, tiny, tiny_shards, tiny_tokenizer, train,
    trained_tokenizer,
};
use common::{
    TempDir, assert_mentions, error_of, fails, headroom, prose, small_config, succeeds, text,
    weights,
};
use headroom_autograd::Tensor;
use headroom_nn::{Gpt, Module, Sampling};
use headroom_trainer::Trainer;
use headroom_trainer::config::{DataKind, Overrides, PrecisionKind};
use headroom_trainer::data::shards::{FileFilter, HeldOut, PrepareOptions, prepare};
use headroom_trainer::data::tokenizer::TextTokenizer;
use headroom_trainer::model::TrainModel;
use headroom_trainer::trained::{EvalData, evaluate_run};
use headroom_trainer::trained::{GenerateOptions, Generated, Stop, generate};
use headroom_trainer::trained::{SavedRun, UseSettings};

/// A run of three steps from the tiny GPT-2 on shards of its tokenizer, in `dir`: the run
/// directory, its shards and its final held-out loss.
fn trained(dir: &TempDir) -> (PathBuf, PathBuf, f64) {
    let shards = tiny_shards(dir);
    let run = dir.0.join("run");
    let summary = train(run_config(&run, Some(&tiny()), &shards, 3, 1e-2));
    (run, shards, summary.metric.expect("a held-out loss"))
}

/// The model of `run`, opened as its run left it.
fn open(run: &Path) -> SavedRun {
    SavedRun::open(run, &UseSettings::default(), None).unwrap()
}

fn gpt_of(run: &SavedRun) -> &Gpt {
    match &run.model {
        TrainModel::Gpt(gpt) => gpt,
        TrainModel::Mlp(_) => panic!("a GPT"),
    }
}

fn options(prompt: &str, max_tokens: usize, sampling: Sampling, seed: u64) -> GenerateOptions {
    GenerateOptions {
        prompt: prompt.into(),
        max_tokens,
        sampling,
        seed,
        precision: PrecisionKind::F32,
        stops: Vec::new(),
        rendered: false,
    }
}

/// Sampling at `temperature`, without filtering.
fn at(temperature: f64) -> Sampling {
    Sampling {
        temperature,
        ..Sampling::default()
    }
}

/// Generates with the run's model and tokenizer: what it did and the pieces it emitted.
fn generated(run: &SavedRun, options: &GenerateOptions) -> (Generated, Vec<String>) {
    let tokenizer = TextTokenizer::load(&run.tokenizer_path()).unwrap();
    let mut pieces = Vec::new();
    let done = generate(gpt_of(run), &tokenizer, options, &mut |piece| {
        pieces.push(piece.to_owned());
        Ok(())
    })
    .unwrap();
    (done, pieces)
}

/// The logits of `ids` by a full forward pass, no cache: `[ids.len(), vocab]` flattened.
fn logits(gpt: &Gpt, ids: &[u32]) -> Vec<f64> {
    let device = gpt.tok_emb.weight.device();
    let ids = Tensor::from_host(device, [1, ids.len()], ids).unwrap();
    gpt.forward(&ids).unwrap().to_f64().unwrap()
}

/// The most likely token of a row of logits (the lowest id on ties).
fn argmax(row: &[f64]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
}

/// `count` tokens after `prompt`, each the most likely by a full pass over all before it.
fn greedy_by_full_passes(gpt: &Gpt, prompt: &[u32], count: usize) -> Vec<u32> {
    let vocab = gpt.config().vocab;
    let mut ids = prompt.to_vec();
    for _ in 0..count {
        let all = logits(gpt, &ids);
        ids.push(argmax(&all[all.len() - vocab..]));
    }
    ids.split_off(prompt.len())
}

/// The mean loss of predicting each of `ids` from those before it (transformers' loss with
/// `labels = ids`).
fn shifted_loss(gpt: &Gpt, ids: &[u32]) -> f64 {
    let device = gpt.tok_emb.weight.device();
    let t = ids.len() - 1;
    let inputs = Tensor::from_host(device, [1, t], &ids[..t]).unwrap();
    let targets = Tensor::from_host(device, [1, t], &ids[1..]).unwrap();
    gpt.loss(&inputs, &targets, None).unwrap().to_f64().unwrap()[0]
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Asserts `a` and `b` agree within `relative`.
fn assert_close(a: f64, b: f64, relative: f64) {
    assert!(
        (a - b).abs() <= relative * b.abs(),
        "{a} against {b} ({:e} relative)",
        (a - b).abs() / b.abs()
    );
}

/// Asserts an `eval.json` describes a loss over `samples` samples; returns the loss.
fn assert_loss_report(json: &serde_json::Value, samples: u64) -> f64 {
    assert_eq!(json["metric"], "loss");
    let value = json["value"].as_f64().unwrap();
    assert_close(json["perplexity"].as_f64().unwrap(), value.exp(), 1e-9);
    assert_eq!(json["samples"].as_u64(), Some(samples));
    value
}

#[test]
fn eval_reports_the_runs_held_out_loss_and_perplexity() {
    let dir = TempDir::new("eval-own");
    let (run, shards, loss) = trained(&dir);
    let said = succeeds(&headroom(&["eval", "--checkpoint", text(&run)]));
    assert_mentions(&said, &["held-out loss", "perplexity", "4 samples"]);
    let json = read_json(&run.join("eval.json"));
    let value = assert_loss_report(&json, 4);
    assert_close(value, loss, 1e-6);
    assert!(value > 0.0 && value < 7.0, "{value}");
    assert_mentions(
        json["data"].as_str().unwrap(),
        &["token-shards", text(&shards)],
    );
    assert_eq!(json["run_dir"].as_str(), Some(text(&run)));
}

#[test]
fn eval_writes_its_json_where_asked() {
    let dir = TempDir::new("eval-json");
    let (run, _, loss) = trained(&dir);
    let path = dir.0.join("judged.json");
    let said = succeeds(&headroom(&[
        "eval",
        "--checkpoint",
        text(&run),
        "--json",
        text(&path),
    ]));
    assert_mentions(&said, &[text(&path)]);
    assert_close(assert_loss_report(&read_json(&path), 4), loss, 1e-6);
    assert!(!run.join("eval.json").exists());
}

#[test]
fn eval_on_other_shards_judges_as_many_of_their_samples_as_asked() {
    let dir = TempDir::new("eval-other");
    let (run, _, _) = trained(&dir);
    let other_corpus = corpus(&dir.0, "other-corpus", 7);
    let other = shards(&tiny_tokenizer(), &other_corpus, dir.0.join("other"));
    let path = dir.0.join("other.json");
    succeeds(&headroom(&[
        "eval",
        "--checkpoint",
        text(&run),
        "--data",
        text(&other),
        "--eval-size",
        "5",
        "--json",
        text(&path),
    ]));
    let json = read_json(&path);
    let value = assert_loss_report(&json, 5);
    assert_mentions(json["data"].as_str().unwrap(), &[text(&other)]);
    // The library says the same.
    let data = EvalData {
        shards: Some(other),
        eval_size: Some(5),
        context: None,
    };
    let report = evaluate_run(&run, &data, &UseSettings::default()).unwrap();
    assert_eq!(report.samples, 5);
    assert_close(report.value, value, 1e-12);
}

#[test]
fn eval_on_other_shards_reads_only_their_held_out_part() {
    let dir = TempDir::new("eval-held-out-only");
    let (run, _, _) = trained(&dir);
    // A validation set prepared beside a training file far shorter than one window.
    let few = dir.0.join("few-words.txt");
    std::fs::write(&few, "the fox.\n").unwrap();
    let valid = corpus(&dir.0, "valid", 3);
    let out = dir.0.join("valid-shards");
    let options = PrepareOptions {
        inputs: vec![few],
        filter: FileFilter::default(),
        out: out.clone(),
        held_out: HeldOut::Files(vec![valid]),
        shard_bytes: 1 << 20,
        progress: false,
    };
    let manifest = prepare(&tiny_tokenizer(), &options).unwrap().manifest;
    assert!(manifest.train_tokens() < 65, "{}", manifest.train_tokens());
    let path = dir.0.join("valid.json");
    let args = [
        "eval",
        "--checkpoint",
        text(&run),
        "--data",
        text(&out),
        "--json",
        text(&path),
    ];
    succeeds(&headroom(&args));
    assert_loss_report(&read_json(&path), 4);
}

#[test]
fn eval_of_a_directory_without_a_checkpoint_is_an_error_naming_it() {
    let dir = TempDir::new("eval-empty");
    let stderr = fails(&headroom(&["eval", "--checkpoint", text(&dir.0)]));
    assert_mentions(&stderr, &["checkpoint.safetensors", "no checkpoint"]);
}

#[test]
fn eval_on_shards_of_a_larger_vocabulary_is_an_error() {
    let dir = TempDir::new("eval-vocab");
    // A model of 300 tokens, from random weights.
    let corpus = corpus(&dir.0, "corpus", 0);
    let tokenizer = trained_tokenizer(&corpus, 300, &dir.0.join("tokenizer-300.json"));
    let small = shards(&tokenizer, &corpus, dir.0.join("shards-300"));
    let run = dir.0.join("run");
    let mut config = run_config(&run, None, &small, 2, 1e-2);
    config.model.context = Some(32);
    train(config);
    // Shards of the tiny model's 320 tokens.
    let large = shards(&tiny_tokenizer(), &corpus, dir.0.join("shards-320"));
    let args = ["eval", "--checkpoint", text(&run), "--data", text(&large)];
    let stderr = fails(&headroom(&args));
    assert_mentions(&stderr, &["320", "300"]);
}

#[test]
fn eval_on_shards_of_another_tokenizer_is_an_error_naming_both() {
    let dir = TempDir::new("eval-tokenizer");
    let (run, _, _) = trained(&dir);
    // The same vocabulary of 320, but not the run's tokenizer: its ids mean other text.
    let corpus = corpus(&dir.0, "other", 1);
    let other = trained_tokenizer(&corpus, 320, &dir.0.join("other-320.json"));
    let foreign = shards(&other, &corpus, dir.0.join("foreign"));
    let args = ["eval", "--checkpoint", text(&run), "--data", text(&foreign)];
    let stderr = fails(&headroom(&args));
    assert_mentions(
        &stderr,
        &["tokenized by tokenizer", "tokenizer.json", "--tokenizer"],
    );
}

#[test]
fn greedy_generation_follows_the_most_likely_token_of_full_passes() {
    let dir = TempDir::new("generate-greedy");
    let (run, _, _) = trained(&dir);
    let run = open(&run);
    let (done, _) = generated(&run, &options("The fox", 12, Sampling::greedy(), 0));
    assert_eq!(done.stop, Stop::MaxTokens);
    let prompt = tiny_tokenizer().encode("The fox").unwrap();
    assert_eq!(done.prompt_tokens, prompt.len());
    let want = greedy_by_full_passes(gpt_of(&run), &prompt, 12);
    assert_eq!(done.tokens, want);
    // Temperature 0 ignores the seed.
    let (again, _) = generated(&run, &options("The fox", 12, Sampling::greedy(), 99));
    assert_eq!(again.tokens, want);
}

#[test]
fn the_same_seed_gives_the_same_text_and_another_seed_another() {
    let dir = TempDir::new("generate-seed");
    let (run, _, _) = trained(&dir);
    let run = open(&run);
    let text_of = |seed| {
        generated(&run, &options("The fox", 20, at(1.0), seed))
            .1
            .concat()
    };
    let first = text_of(3);
    assert!(!first.is_empty());
    assert_eq!(text_of(3), first);
    assert_ne!(text_of(4), first);
}

#[test]
fn a_prompt_longer_than_the_context_is_an_error_naming_it() {
    let dir = TempDir::new("generate-long");
    let (run, _, _) = trained(&dir);
    let run = open(&run);
    let prompt = prose(1, 20);
    assert!(tiny_tokenizer().encode(&prompt).unwrap().len() > 64);
    let tokenizer = TextTokenizer::load(&run.tokenizer_path()).unwrap();
    let err = error_of(generate(
        gpt_of(&run),
        &tokenizer,
        &options(&prompt, 5, Sampling::greedy(), 0),
        &mut |_| Ok(()),
    ));
    assert_mentions(&err, &["prompt", "context of 64"]);
}

#[test]
fn generation_stops_when_the_context_is_full() {
    let dir = TempDir::new("generate-context");
    let (run, _, _) = trained(&dir);
    let run = open(&run);
    // A prompt of 60 tokens leaves room for 5: few draws for the end-of-text token to end
    // the text first.
    let tokenizer = TextTokenizer::load(&run.tokenizer_path()).unwrap();
    let ids = tokenizer.encode(&prose(7, 40)).unwrap();
    let prompt = tokenizer.decode(&ids[..60]).unwrap();
    let (done, _) = generated(&run, &options(&prompt, 1000, at(0.7), 5));
    assert_eq!(done.stop, Stop::Context);
    // The last token is predicted from a full context of 64, and never read.
    assert_eq!(done.prompt_tokens + done.tokens.len(), 64 + 1);
    assert!(done.cache_bytes > 0);
}

#[test]
fn the_emitted_pieces_make_up_the_decoded_tokens() {
    let dir = TempDir::new("generate-pieces");
    let (run, _, _) = trained(&dir);
    let run = open(&run);
    let tokenizer = tiny_tokenizer();
    let end = tokenizer.end_of_text().unwrap();
    for seed in 0..4 {
        let (done, pieces) = generated(&run, &options("The fox", 40, at(1.5), seed));
        let mut tokens = done.tokens.clone();
        if done.stop == Stop::EndOfText {
            assert_eq!(tokens.pop(), Some(end));
        }
        assert!(
            !tokens.contains(&end),
            "generation stops at the end of text"
        );
        assert_eq!(pieces.concat(), tokenizer.decode(&tokens).unwrap());
    }
}

#[test]
fn the_command_line_continues_a_prompt() {
    let dir = TempDir::new("generate-cli");
    let (run, _, _) = trained(&dir);
    let args = [
        "generate",
        "--checkpoint",
        text(&run),
        "--prompt",
        "The fox",
        "--max-tokens",
        "5",
        "--temperature",
        "0",
    ];
    let said = succeeds(&headroom(&args));
    assert!(said.starts_with("The fox"), "{said:?}");
    // What the library generates, greedily.
    let (_, pieces) = generated(&open(&run), &options("The fox", 5, Sampling::greedy(), 0));
    assert_eq!(said, format!("The fox{}\n", pieces.concat()));
}

#[test]
fn the_command_line_refuses_a_prompt_longer_than_the_context_before_printing_it() {
    let dir = TempDir::new("generate-long-cli");
    let (run, _, _) = trained(&dir);
    let prompt = prose(1, 20);
    let tokens = tiny_tokenizer().encode(&prompt).unwrap().len();
    assert!(tokens > 64);
    let output = headroom(&["generate", "--checkpoint", text(&run), "--prompt", &prompt]);
    let stderr = fails(&output);
    assert!(
        output.stdout.is_empty(),
        "printed: {:?}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert_mentions(
        &stderr,
        &[&format!("the prompt is {tokens} tokens"), "context of 64"],
    );
}

/// A character-level run (`data.kind = "text"`) of two steps on prose written into `dir`:
/// the run directory and the text.
fn character_run(dir: &TempDir) -> (PathBuf, String) {
    let corpus = prose(3, 200);
    let path = dir.0.join("input.txt");
    std::fs::write(&path, &corpus).unwrap();
    let run = dir.0.join("run");
    let mut config = small_config(dir);
    config.run_dir = Some(run.clone());
    config.steps = Some(2);
    config.data.kind = DataKind::Text;
    config.data.path = Some(path);
    config.data.context = 32;
    train(config);
    (run, corpus)
}

#[test]
fn a_character_run_keeps_its_characters_and_generates_without_a_tokenizer() {
    let dir = TempDir::new("generate-chars");
    let (run, corpus) = character_run(&dir);
    let kept = TextTokenizer::load(&run.join("tokenizer.json")).unwrap();
    let sample: String = corpus.chars().take(300).collect();
    let ids = kept.encode(&sample).unwrap();
    assert_eq!(ids.len(), sample.chars().count(), "one token a character");
    assert_eq!(kept.decode(&ids).unwrap(), sample);

    let prompt: String = corpus.chars().take(10).collect();
    let args = [
        "generate",
        "--checkpoint",
        text(&run),
        "--prompt",
        &prompt,
        "--max-tokens",
        "20",
    ];
    let said = succeeds(&headroom(&args));
    let generated = said
        .strip_prefix(prompt.as_str())
        .and_then(|rest| rest.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("{said:?}"));
    // No end-of-text among characters, and 10 + 20 is within the context of 32.
    assert_eq!(generated.chars().count(), 20, "{generated:?}");
    assert!(
        generated.chars().all(|c| corpus.contains(c)),
        "{generated:?}"
    );
}

#[test]
fn text_prepared_with_a_character_runs_tokenizer_is_judged_by_eval() {
    let dir = TempDir::new("eval-chars");
    let (run, corpus) = character_run(&dir);
    let kept = TextTokenizer::load(&run.join("tokenizer.json")).unwrap();
    let texts = dir.0.join("more-text");
    std::fs::create_dir_all(&texts).unwrap();
    std::fs::write(texts.join("input.txt"), &corpus).unwrap();
    let prepared = shards(&kept, &texts, dir.0.join("char-shards"));
    let data = EvalData {
        shards: Some(prepared),
        eval_size: Some(4),
        context: None,
    };
    let report = evaluate_run(&run, &data, &UseSettings::default()).unwrap();
    assert_eq!(report.samples, 4);
    assert!(report.value.is_finite() && report.value > 0.0, "{report}");
}

#[test]
fn a_prompt_with_characters_the_run_never_saw_is_refused_naming_them() {
    let dir = TempDir::new("generate-unknown-chars");
    let (run, corpus) = character_run(&dir);
    let unknown: Vec<char> = "#~{@".chars().filter(|c| !corpus.contains(*c)).collect();
    assert!(unknown.len() >= 2, "{unknown:?}");
    let known: String = corpus.chars().take(5).collect();
    let prompt = format!("{known}{}{known}{}", unknown[0], unknown[1]);
    let output = headroom(&["generate", "--checkpoint", text(&run), "--prompt", &prompt]);
    let stderr = fails(&output);
    assert!(output.stdout.is_empty());
    assert_mentions(
        &stderr,
        &[
            &format!("{:?}", unknown[0]),
            &format!("{:?}", unknown[1]),
            "lacks",
        ],
    );
}

#[test]
fn a_run_without_a_tokenizer_asks_for_one() {
    let dir = TempDir::new("generate-addition");
    train(small_config(&dir));
    assert!(!dir.0.join("tokenizer.json").exists());
    let stderr = fails(&headroom(&["generate", "--checkpoint", text(&dir.0)]));
    assert_mentions(&stderr, &["tokenizer.json", "--tokenizer"]);
}

#[test]
fn a_top_p_above_one_is_refused() {
    let dir = TempDir::new("generate-top-p");
    let (run, _, _) = trained(&dir);
    let args = ["generate", "--checkpoint", text(&run), "--top-p", "1.5"];
    let stderr = fails(&headroom(&args));
    assert_mentions(&stderr, &["top_p 1.5"]);
}

/// Headroom's logits and loss for `ids` by `gpt`, in the format of make_tiny_gpt2.py's
/// `expected.json`.
fn expected_json(gpt: &Gpt, text: &str, ids: &[u32]) -> serde_json::Value {
    let logits: Vec<f32> = logits(gpt, ids).into_iter().map(|x| x as f32).collect();
    serde_json::json!({
        "text": text,
        "ids": ids,
        "vocab_size": gpt.config().vocab,
        "logits_shape": [1, ids.len(), gpt.config().vocab],
        "logits": logits,
        "loss": shifted_loss(gpt, ids),
    })
}

#[test]
fn an_export_imports_again_bit_for_bit() {
    let dir = TempDir::new("export-round-trip");
    let (run, shards, _) = trained(&dir);
    let out = dir.0.join("export");
    export(&run, &out);
    let saved = open(&run);
    // A run from the export starts from the trained weights, bit for bit.
    let mut config = configured(&out, Overrides::default()).unwrap();
    config.run_dir = Some(dir.0.join("again"));
    config.data = saved.config.data.clone();
    config.batch.micro = Some(4);
    config.memory.limit = Some(headroom_alloc::ByteSize::mib(64));
    config.memory.trace = false;
    let again = Trainer::new(config).unwrap();
    let trained_weights: Vec<Vec<u64>> = saved
        .model
        .module()
        .parameters()
        .iter()
        .map(|p| p.to_f64().unwrap().into_iter().map(f64::to_bits).collect())
        .collect();
    assert!(weights(&again) == trained_weights, "the weights differ");
    drop(again);
    // And so does the command line, with the tokenizer the export carries.
    assert!(
        std::fs::read(out.join("tokenizer.json")).unwrap()
            == std::fs::read(tiny().join("tokenizer.json")).unwrap()
    );
    let cli_run = dir.0.join("cli-again");
    let args = [
        "train",
        "--init-from",
        text(&out),
        "--data",
        "token-shards",
        "--data-path",
        text(&shards),
        "--steps",
        "1",
        "--batch-size",
        "4",
        "--micro-batch",
        "4",
        "--memory-limit",
        "64MiB",
        "--eval-every",
        "0",
        "--run-dir",
        text(&cli_run),
        "--quiet",
    ];
    succeeds(&headroom(&args));

    if let Ok(keep) = std::env::var("HEADROOM_KEEP_HF_EXPORT") {
        let keep = Path::new(&keep);
        export(&run, keep);
        let sentence = "The fox runs to the sea.";
        let ids = tiny_tokenizer().encode(sentence).unwrap();
        let json = expected_json(gpt_of(&saved), sentence, &ids);
        std::fs::write(keep.join("expected.json"), json.to_string()).unwrap();
    }
}

#[test]
fn the_export_names_the_tokenizers_end_of_text() {
    let dir = TempDir::new("export-config");
    let (run, _, _) = trained(&dir);
    let out = dir.0.join("export");
    export(&run, &out);
    let config = read_json(&out.join("config.json"));
    let end = u64::from(tiny_tokenizer().end_of_text().unwrap());
    assert_eq!(config["eos_token_id"].as_u64(), Some(end));
    assert_eq!(config["bos_token_id"].as_u64(), Some(end));
    assert_eq!(config["vocab_size"].as_u64(), Some(320));
    assert_eq!(config["n_positions"].as_u64(), Some(64));
}

#[test]
fn a_model_without_a_tokenizer_exports_without_one() {
    let dir = TempDir::new("export-addition");
    train(small_config(&dir));
    let out = dir.0.join("export");
    export(&dir.0, &out);
    assert!(out.join("config.json").exists() && out.join("model.safetensors").exists());
    assert!(!out.join("tokenizer.json").exists());
}
