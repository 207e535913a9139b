//! `model.init_from`, as a user relies on it: a Hugging Face GPT-2 directory (the tiny one
//! made with transformers, nn/tests/data/tiny-gpt2) fixes the model's shape, its weights are
//! the ones a run starts from (and exports again), and every way the configuration or the data
//! can disagree with it is an error that says what disagrees.

mod common;

use std::path::Path;

use common::tiny::{
    TINY, batch_loss, configured, corpus, export, hf_tensors, run_config, shards, tiny,
    tiny_shards, tiny_tokenizer, tiny_untied, train, trained_tokenizer,
};
use common::{
    TempDir, assert_mentions, assert_same_checkpoints, error_of, fails, headroom, resume, text,
};
use headroom_kernels::DType;
use headroom_nn::hf::{Gpt2Config, load_gpt2};
use headroom_nn::{Gpt, Initializer};
use headroom_trainer::Trainer;
use headroom_trainer::config::{Overrides, Preset};
use headroom_trainer::model::TrainModel;

/// A learning rate that moves no weight: the run only measures (a sanity run).
const STILL_LR: f64 = 0.0;

/// The GPT the Hugging Face directory `dir` describes, loaded from it.
fn loaded(dir: &Path) -> Gpt {
    let shape = Gpt2Config::read(dir).unwrap().gpt_config(0.0);
    let device = common::tiny::cpu();
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 1), shape).unwrap();
    load_gpt2(dir, &mut gpt).unwrap();
    gpt
}

/// The largest difference between two Hugging Face directories' tensors, which must have the
/// same names and shapes. Both keep GPT-2's layout (`Conv1D` weights `[in, out]`), so the same
/// name has the same layout in each.
fn largest_difference(a: &Path, b: &Path) -> f64 {
    let (a, b) = (hf_tensors(a), hf_tensors(b));
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "the same tensors"
    );
    let mut largest = 0.0_f64;
    for (name, (dims, values)) in &a {
        let (other_dims, other) = &b[name];
        assert_eq!(dims, other_dims, "{name}");
        for (x, y) in values.iter().zip(other) {
            largest = largest.max((x - y).abs());
        }
    }
    largest
}

/// The values of `key` in a Hugging Face directory's weights.
fn hf_tensor(dir: &Path, key: &str) -> Vec<f64> {
    hf_tensors(dir).remove(key).unwrap().1
}

#[test]
fn init_from_takes_the_pretrained_shape() {
    let config = configured(&tiny(), Overrides::default()).unwrap();
    let model = &config.model;
    assert_eq!((model.layers, model.width, model.heads), (2, 16, 4));
    assert_eq!((model.vocab, model.context), (Some(320), Some(64)));
    assert!(model.tie_embeddings);
    assert_eq!(model.init_from.as_deref(), Some(tiny().as_path()));
    config.validate().unwrap();
}

#[test]
fn the_pretrained_shape_wins_over_a_preset() {
    let overrides = Overrides {
        preset: Some(Preset::named("gpt2").unwrap()),
        ..Overrides::default()
    };
    let config = configured(&tiny(), overrides).unwrap();
    let model = &config.model;
    assert_eq!((model.layers, model.width, model.heads), (2, 16, 4));
    assert_eq!((model.vocab, model.context), (Some(320), Some(64)));
    assert!(model.tie_embeddings);
    assert_eq!(
        model.preset, None,
        "no preset left to fill in what is unset"
    );
    config.validate().unwrap();
}

#[test]
fn the_untied_model_gives_an_untied_shape() {
    let config = configured(&tiny_untied(), Overrides::default()).unwrap();
    assert!(!config.model.tie_embeddings);
    config.validate().unwrap();
}

#[test]
fn a_configured_width_that_differs_is_an_error_naming_both_fields() {
    let dir = TempDir::new("pretrained-width");
    let file = dir.0.join("run.toml");
    std::fs::write(&file, "[model]\nwidth = 32\n").unwrap();
    let overrides = Overrides {
        init_from: Some(tiny()),
        ..Overrides::default()
    };
    let err = overrides.configure(Some(&file)).unwrap_err();
    assert!(
        matches!(err, headroom_trainer::Error::Config { .. }),
        "{err:?}"
    );
    assert_mentions(
        &err.to_string(),
        &["model.width = 32", "n_embd", "16", "config.json"],
    );
}

#[test]
fn a_configured_value_equal_to_the_default_still_conflicts() {
    // `width = 128` and `tie_embeddings = false` are the defaults: written in the file, they
    // are the user's choice all the same, and the tiny model's 16 and tied head conflict.
    let dir = TempDir::new("pretrained-written-default");
    let file = dir.0.join("run.toml");
    std::fs::write(&file, "[model]\nwidth = 128\ntie_embeddings = false\n").unwrap();
    let overrides = Overrides {
        init_from: Some(tiny()),
        ..Overrides::default()
    };
    let err = overrides.configure(Some(&file)).unwrap_err().to_string();
    assert_mentions(&err, &["model.width = 128", "n_embd"]);
    assert_mentions(
        &err,
        &["model.tie_embeddings = false", "tie_word_embeddings"],
    );
}

#[test]
fn a_configured_shape_equal_to_the_pretrained_one_is_accepted() {
    let dir = TempDir::new("pretrained-same");
    let file = dir.0.join("run.toml");
    std::fs::write(
        &file,
        "[model]\nwidth = 16\nheads = 4\nlayers = 2\nvocab = 320\ntie_embeddings = true\n",
    )
    .unwrap();
    let overrides = Overrides {
        init_from: Some(tiny()),
        ..Overrides::default()
    };
    let config = overrides.configure(Some(&file)).unwrap();
    assert_eq!(config.model.width, 16);
    config.validate().unwrap();
}

#[test]
fn a_shorter_context_is_accepted_and_a_longer_one_refused() {
    let shorter = Overrides {
        context: Some(32),
        ..Overrides::default()
    };
    let config = configured(&tiny(), shorter).unwrap();
    assert_eq!(config.model.context, Some(32));
    config.validate().unwrap();

    let longer = Overrides {
        context: Some(128),
        ..Overrides::default()
    };
    let err = error_of(configured(&tiny(), longer));
    assert_mentions(&err, &["model.context = 128", "n_positions", "64"]);
}

#[test]
fn a_longer_context_is_refused_by_the_command_line() {
    let stderr = fails(&headroom(&[
        "train",
        "--init-from",
        TINY,
        "--context",
        "128",
    ]));
    assert_mentions(&stderr, &["model.context = 128", "n_positions"]);
}

#[test]
fn a_directory_without_config_json_is_an_error_naming_it() {
    let dir = TempDir::new("pretrained-empty");
    let err = error_of(configured(&dir.0, Overrides::default()));
    assert_mentions(&err, &[&dir.0.join("config.json").display().to_string()]);
    // A configuration that names it without going through the flags is refused too.
    let mut config = configured(&tiny(), Overrides::default()).unwrap();
    config.model.init_from = Some(dir.0.clone());
    let err = error_of(config.validate());
    assert_mentions(
        &err,
        &[
            "model.init_from",
            &dir.0.join("config.json").display().to_string(),
        ],
    );
}

/// A copy of the tiny model in `dir/name` whose `key` (f16) holds a NaN at flat element
/// `element`; returns the copy.
fn poisoned_copy(dir: &Path, name: &str, key: &str, element: usize) -> std::path::PathBuf {
    let out = dir.join(name);
    std::fs::create_dir_all(&out).unwrap();
    for file in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(tiny().join(file), out.join(file)).unwrap();
    }
    // A safetensors file: the header's length (8 bytes, little-endian), the JSON header with
    // each tensor's dtype and byte range, then the data.
    let path = out.join("model.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    assert_eq!(header[key]["dtype"], "F16");
    let start = header[key]["data_offsets"][0].as_u64().unwrap() as usize;
    let at = 8 + header_len + start + 2 * element;
    bytes[at..at + 2].copy_from_slice(&0x7E00u16.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
    out
}

#[test]
fn non_finite_pretrained_weights_are_refused_naming_the_tensor_and_where() {
    let dir = TempDir::new("pretrained-nan");
    let shards = tiny_shards(&dir);
    // The NaN at row 3, column 9 of the token embedding, stored [320, 16].
    let key = "transformer.wte.weight";
    let poisoned = poisoned_copy(&dir.0, "nan-gpt2", key, 3 * 16 + 9);
    let run = dir.0.join("run");
    let stderr = fails(&headroom(&[
        "train",
        "--init-from",
        text(&poisoned),
        "--data",
        "token-shards",
        "--data-path",
        text(&shards),
        "--steps",
        "2",
        "--batch-size",
        "4",
        "--micro-batch",
        "4",
        "--memory-limit",
        "64MiB",
        "--eval-every",
        "0",
        "--run-dir",
        text(&run),
        "--quiet",
    ]));
    assert_mentions(&stderr, &[key, "NaN at [3, 9]"]);
    assert!(
        !headroom_trainer::run_dir::checkpoint_path(&run).exists(),
        "no checkpoint of the poisoned weights"
    );
}

#[test]
fn the_first_step_trains_the_pretrained_weights() {
    let dir = TempDir::new("pretrained-first-step");
    let shards = tiny_shards(&dir);
    // The loss of the batch the run's first step trained on, by a fresh load of the tiny model.
    let first_loss = |init_from: Option<&Path>, run: &str| {
        let config = run_config(&dir.0.join(run), init_from, &shards, 2, 1e-3);
        let mut trainer = Trainer::new(config).unwrap();
        let report = trainer.train_step().unwrap();
        let want = batch_loss(&trainer, &report.indices, &loaded(&tiny()));
        (report.loss, want)
    };
    let (loss, want) = first_loss(Some(&tiny()), "pretrained");
    assert!(
        (loss - want).abs() <= 1e-5 * want,
        "the run's first loss {loss}, the tiny model's {want}"
    );
    // The same batch from random weights of the same shape: another loss (both models are
    // near the uniform loss, ln 320, so the difference is small, but far above the match's).
    let (random, want) = first_loss(None, "random");
    assert!(
        (random - want).abs() > 1e-4 * want,
        "random weights' loss {random}, the tiny model's {want}"
    );
}

#[test]
fn an_export_of_the_run_holds_the_pretrained_tensors() {
    let dir = TempDir::new("pretrained-export");
    let shards = tiny_shards(&dir);
    let run = dir.0.join("run");
    train(run_config(&run, Some(&tiny()), &shards, 2, STILL_LR));
    let out = dir.0.join("export");
    export(&run, &out);
    let difference = largest_difference(&out, &tiny());
    assert!(difference < 1e-20, "the weights moved by {difference}");
    // The run kept the tokenizer, and the export carries it on.
    let tokenizer = std::fs::read(tiny().join("tokenizer.json")).unwrap();
    assert!(std::fs::read(run.join("tokenizer.json")).unwrap() == tokenizer);
    assert!(std::fs::read(out.join("tokenizer.json")).unwrap() == tokenizer);

    // The same run from random weights exports other tensors.
    let random = dir.0.join("random");
    train(run_config(&random, None, &shards, 2, STILL_LR));
    let random_out = dir.0.join("random-export");
    export(&random, &random_out);
    let difference = largest_difference(&random_out, &tiny());
    assert!(difference > 1e-2, "random weights differ by {difference}");
}

#[test]
fn a_shorter_context_trains_on_the_first_positions() {
    let dir = TempDir::new("pretrained-crop");
    let shards = tiny_shards(&dir);
    let run = dir.0.join("run");
    let mut config = run_config(&run, Some(&tiny()), &shards, 2, STILL_LR);
    config.model.context = Some(32);
    train(config);
    let out = dir.0.join("export");
    export(&run, &out);
    let exported = hf_tensors(&out);
    let (dims, positions) = &exported["transformer.wpe.weight"];
    assert_eq!(dims, &[32, 16]);
    let original = hf_tensor(&tiny(), "transformer.wpe.weight");
    assert!(positions[..] == original[..32 * 16], "the first 32 rows");
    assert_eq!(Gpt2Config::read(&out).unwrap().n_positions, 32);
}

#[test]
fn the_untied_model_loads_with_its_own_head() {
    let dir = TempDir::new("pretrained-untied");
    // The untied directory has no tokenizer: the tied one's has the same 320 tokens.
    let shards = tiny_shards(&dir);
    assert_eq!(
        Gpt2Config::read(&tiny_untied()).unwrap().vocab_size,
        tiny_tokenizer().vocab()
    );
    let run = dir.0.join("run");
    let config = run_config(&run, Some(&tiny_untied()), &shards, 2, STILL_LR);
    let trainer = Trainer::new(config.clone()).unwrap();
    let Some(TrainModel::Gpt(gpt)) = trainer.builtin_model() else {
        panic!("a GPT");
    };
    let head = gpt.head.as_ref().expect("an untied head");
    let values = head.weight.values().unwrap().to_f64().unwrap();
    assert!(values == hf_tensor(&tiny_untied(), "lm_head.weight"));
    assert!(values != gpt.tok_emb.weight.values().unwrap().to_f64().unwrap());
    drop(trainer);

    train(config);
    let out = dir.0.join("export");
    export(&run, &out);
    let difference = largest_difference(&out, &tiny_untied());
    assert!(difference < 1e-20, "the weights moved by {difference}");
    assert!(hf_tensors(&out).contains_key("lm_head.weight"));
}

#[test]
fn shards_of_another_vocabulary_are_refused() {
    let dir = TempDir::new("pretrained-vocab");
    let corpus = corpus(&dir.0, "corpus", 0);
    let tokenizer = trained_tokenizer(&corpus, 300, &dir.0.join("tokenizer-300.json"));
    let shards = shards(&tokenizer, &corpus, dir.0.join("shards-300"));
    // The tied model has a tokenizer, which these shards were not made with.
    let config = run_config(&dir.0.join("run"), Some(&tiny()), &shards, 2, 1e-3);
    let err = error_of(Trainer::new(config));
    assert_mentions(
        &err,
        &["data.path", "tokenizer", "tiny-gpt2/tokenizer.json"],
    );
    // The untied one has none: the vocabularies disagree.
    let config = run_config(&dir.0.join("run"), Some(&tiny_untied()), &shards, 2, 1e-3);
    let err = error_of(Trainer::new(config));
    assert_mentions(&err, &["model.vocab", "320", "300"]);
    assert!(!dir.0.join("run").exists(), "a refused run leaves nothing");
}

#[test]
fn shards_of_another_tokenizer_of_the_same_vocabulary_are_refused() {
    let dir = TempDir::new("pretrained-tokenizer");
    let corpus = corpus(&dir.0, "corpus", 0);
    let other = dir.0.join("tokenizer-320.json");
    let tokenizer = trained_tokenizer(&corpus, 320, &other);
    let shards = shards(&tokenizer, &corpus, dir.0.join("shards-320"));
    let mut config = run_config(&dir.0.join("run"), Some(&tiny()), &shards, 2, 1e-3);
    let problem = config
        .pretrained_tokenizer_mismatch()
        .expect("another tokenizer");
    let ours = format!("{:016x}", tiny_tokenizer().hash());
    let theirs = format!("{:016x}", tokenizer.hash());
    assert_mentions(&problem, &[&ours, &theirs, "tiny-gpt2/tokenizer.json"]);
    let err = error_of(Trainer::new(config.clone()));
    assert_mentions(&err, &[&ours, &theirs]);
    // Shards of the pretrained model's own tokenizer are not.
    config.data.path = Some(tiny_shards(&dir));
    assert_eq!(config.pretrained_tokenizer_mismatch(), None);
}

#[test]
fn a_resumed_run_continues_from_its_checkpoint_not_the_pretrained_weights() {
    let dir = TempDir::new("pretrained-resume");
    let shards = tiny_shards(&dir);
    let run = dir.0.join("run");
    let mut config = run_config(&run, Some(&tiny()), &shards, 3, 1e-2);
    // Two of its three steps, and a checkpoint.
    let mut stopped = Trainer::new(config.clone()).unwrap();
    stopped.train_step().unwrap();
    stopped.train_step().unwrap();
    stopped.save_checkpoint().unwrap();
    drop(stopped);
    let mut resumed = resume(config.clone()).unwrap();
    assert_eq!(resumed.steps_done(), 2);
    resumed.run(false).unwrap();
    // A run never stopped ends with the same weights; one that loaded the pretrained weights
    // again on resuming would not.
    let straight = dir.0.join("straight");
    config.run_dir = Some(straight.clone());
    train(config);
    assert_same_checkpoints(&run, &straight);
    let out = dir.0.join("export");
    export(&run, &out);
    let difference = largest_difference(&out, &tiny());
    assert!(
        difference > 1e-4,
        "three steps moved the weights by {difference}"
    );
}

#[test]
fn a_pretrained_epsilon_stays_with_the_run_and_its_saved_model() {
    // The tiny model with GPT-2's config but another layer-norm epsilon.
    let dir = TempDir::new("pretrained-epsilon");
    let pretrained = dir.0.join("tiny-eps");
    std::fs::create_dir_all(&pretrained).unwrap();
    for file in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(tiny().join(file), pretrained.join(file)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tiny().join("config.json")).unwrap())
            .unwrap();
    config["layer_norm_epsilon"] = serde_json::json!(1e-3);
    std::fs::write(pretrained.join("config.json"), config.to_string()).unwrap();

    let shards = tiny_shards(&dir);
    let run = dir.0.join("run");
    let run_config = run_config(&run, Some(&pretrained), &shards, 1, 1e-3);
    assert_eq!(run_config.model.norm_eps, Some(1e-3));
    train(run_config);
    let saved = headroom_trainer::trained::SavedRun::open(&run, &Default::default(), None);
    let TrainModel::Gpt(gpt) = saved.unwrap().model else {
        panic!("a GPT");
    };
    let norms = gpt.blocks.iter().flat_map(|b| [b.ln1.eps(), b.ln2.eps()]);
    assert!(norms.chain([gpt.ln_f.eps()]).all(|eps| eps == 1e-3));
}

#[test]
fn a_bf16_run_starts_from_the_pretrained_weights_rounded_and_exports_them() {
    let dir = TempDir::new("pretrained-bf16");
    let shards = tiny_shards(&dir);
    let run = dir.0.join("run");
    let mut config = run_config(&run, Some(&tiny()), &shards, 2, STILL_LR);
    config.model.param_dtype = headroom_trainer::config::ParamDtype::Bf16;
    train(config);
    let out = dir.0.join("export");
    export(&run, &out);
    let (exported, pretrained) = (hf_tensors(&out), hf_tensors(&tiny()));
    let mut rounded = 0;
    for (name, (dims, values)) in &pretrained {
        let (their_dims, theirs) = &exported[name];
        assert_eq!(dims, their_dims, "{name}");
        for (x, y) in values.iter().zip(theirs) {
            // bf16 keeps 7 bits of fraction: rounded to nearest, within 2^-8 of the value.
            assert!(
                (x - y).abs() <= x.abs() / 256.0,
                "{name}: {y} exported for {x}"
            );
            rounded += usize::from(x != y);
        }
    }
    assert!(rounded > 0, "no weight was rounded to bf16");
}
