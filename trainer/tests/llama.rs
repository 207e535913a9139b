//! The Llama family through the trainer: its peak is predicted exactly under every memory
//! technique, and `--init-from` a Llama-family directory (the tiny Llama 3 made with
//! transformers, nn/tests/data/tiny-llama3, sharded and in bf16) takes its family and options,
//! and starts the run from its weights.

mod common;

use std::path::{Path, PathBuf};

use common::tiny::{configured, corpus, run_config, shards};
use common::{TempDir, small_config};
use headroom_kernels::DType;
use headroom_nn::hf::{LlamaConfig, load_llama};
use headroom_nn::{Family, Gpt, Initializer, Module};
use headroom_trainer::Trainer;
use headroom_trainer::config::{
    ModelFamily, Overrides, PrecisionKind, Recompute, StateKind, TrainConfig,
};
use headroom_trainer::data::tokenizer::TextTokenizer;

fn tiny_llama() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn/tests/data/tiny-llama3")
}

/// A small Llama-family configuration: 4 query heads sharing 2 key/value heads, query/key
/// norms and q/k/v biases off or on.
fn llama_config(dir: &TempDir, qwen: bool) -> TrainConfig {
    let mut config = small_config(dir);
    let model = &mut config.model;
    model.family = ModelFamily::Llama;
    (model.width, model.heads, model.layers) = (32, 4, 2);
    model.kv_heads = Some(2);
    model.mlp_width = Some(48);
    model.qk_norm = qwen;
    config
}

#[test]
fn a_llama_family_step_peaks_where_the_planner_predicts_under_every_technique() {
    let dir = TempDir::new("llama-plan");
    for (recompute, precision, state, in_backward) in [
        (Recompute::None, PrecisionKind::F32, StateKind::F32, false),
        (Recompute::Cheap, PrecisionKind::F32, StateKind::F32, false),
        (
            Recompute::CheapUp,
            PrecisionKind::F32,
            StateKind::F32,
            false,
        ),
        (Recompute::Blocks, PrecisionKind::F32, StateKind::F32, false),
        (
            Recompute::BlocksTiled,
            PrecisionKind::F32,
            StateKind::F32,
            false,
        ),
        (Recompute::None, PrecisionKind::Bf16, StateKind::F32, false),
        (Recompute::Cheap, PrecisionKind::Bf16, StateKind::Int8, true),
        (
            Recompute::CheapUp,
            PrecisionKind::Bf16,
            StateKind::Bf16,
            true,
        ),
        (
            Recompute::Blocks,
            PrecisionKind::Bf16,
            StateKind::Bf16,
            true,
        ),
        (
            Recompute::BlocksTiled,
            PrecisionKind::Bf16,
            StateKind::Bf16,
            true,
        ),
    ] {
        let mut config = llama_config(&dir, recompute == Recompute::Cheap);
        config.batch.micro = None;
        config.model.recompute = Some(recompute);
        config.precision.dtype = precision;
        config.optimizer.clip = 0.0;
        config.optimizer.state = Some(state);
        config.optimizer.in_backward = Some(in_backward);
        let mut trainer = Trainer::builder()
            .config(config)
            .overwrite()
            .build()
            .unwrap();
        let plan = trainer.plan().unwrap().clone();
        let report = trainer.train_step().unwrap();
        assert!(report.loss.is_finite());
        let measured = trainer.device().allocator().stats().peak_in_use;
        let case = format!("{recompute:?} {precision:?} {state:?} in backward {in_backward}");
        assert_eq!(measured, plan.predicted_peak, "{case}: {plan}");
    }
}

#[test]
fn init_from_a_llama_directory_takes_its_family_and_options() {
    let config = configured(&tiny_llama(), Overrides::default()).unwrap();
    let model = &config.model;
    let published = LlamaConfig::read(&tiny_llama()).unwrap();
    assert_eq!(model.family, ModelFamily::Llama);
    assert_eq!((model.layers, model.width, model.heads), (2, 32, 4));
    assert_eq!(model.vocab, Some(320));
    assert!(!model.tie_embeddings);
    assert_eq!(
        model.family_parts(),
        Family::Llama(published.options),
        "every option as the file has it"
    );
    // A rotary model's context bounds the window without setting it.
    assert_eq!(model.context, None);
    config.validate().unwrap();
    // A shape the configuration sets otherwise is refused, naming both fields.
    let overrides = Overrides {
        context: Some(published.max_position_embeddings + 1),
        ..Overrides::default()
    };
    let err = configured(&tiny_llama(), overrides)
        .and_then(|c| c.validate())
        .unwrap_err();
    assert!(err.to_string().contains("max_position_embeddings"), "{err}");
}

#[test]
fn the_first_step_trains_the_pretrained_llama_weights() {
    let dir = TempDir::new("llama-first-step");
    let tokenizer = TextTokenizer::load(&tiny_llama()).unwrap();
    let text = corpus(&dir.0, "corpus.txt", 3);
    let shards = shards(&tokenizer, &text, dir.0.join("shards"));
    let mut config = run_config(&dir.0.join("run"), Some(&tiny_llama()), &shards, 2, 1e-3);
    config.data.context = 32;
    let mut trainer = Trainer::new(config).unwrap();
    let report = trainer.train_step().unwrap();
    // The same batch through the tiny model loaded by hand.
    let shape = LlamaConfig::read(&tiny_llama()).unwrap().gpt_config(0.0);
    let device = common::tiny::cpu();
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 1), shape).unwrap();
    load_llama(&tiny_llama(), &mut gpt).unwrap();
    let want = common::tiny::batch_loss(&trainer, &report.indices, &gpt);
    assert!(
        (report.loss - want).abs() <= 1e-5 * want,
        "the run's first loss {}, the tiny model's {want}",
        report.loss
    );
}

/// The text and ids of a tiny model's `expected.json`.
fn expected_text(name: &str) -> (String, Vec<u32>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../nn/tests/data")
        .join(name)
        .join("expected.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let ids = json["ids"].as_array().unwrap();
    let ids = ids.iter().map(|v| v.as_u64().unwrap() as u32).collect();
    (json["text"].as_str().unwrap().to_owned(), ids)
}

#[test]
fn llama_family_tokenizers_encode_as_transformers_and_know_their_special_tokens() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn/tests/data");
    // Llama 3: a begin-of-text token in front, <|end_of_text|> at the end.
    let llama = TextTokenizer::load(&data.join("tiny-llama3")).unwrap();
    let (text, ids) = expected_text("tiny-llama3");
    assert_eq!(llama.encode_document(&text).unwrap(), ids);
    assert_eq!(ids[0], 318, "<|begin_of_text|>");
    assert_eq!(llama.end_of_text(), Some(319));
    assert_eq!(llama.stops(), [319]);
    // SmolLM2: nothing added, <|endoftext|> ends a text and <|im_end|> a turn.
    let smollm2 = TextTokenizer::load(&data.join("tiny-smollm2")).unwrap();
    let (text, ids) = expected_text("tiny-smollm2");
    assert_eq!(smollm2.encode_document(&text).unwrap(), ids);
    assert_eq!(smollm2.encode(&text).unwrap(), ids);
    assert_eq!(smollm2.end_of_text(), Some(0));
    assert_eq!(smollm2.stops().len(), 2);
}

#[test]
fn an_export_of_a_llama_run_is_the_pretrained_model_and_shards_on_request() {
    let dir = TempDir::new("llama-export");
    let tokenizer = TextTokenizer::load(&tiny_llama()).unwrap();
    let text = corpus(&dir.0, "corpus.txt", 5);
    let shards = shards(&tokenizer, &text, dir.0.join("shards"));
    // A learning rate of 0: the run holds the pretrained weights.
    let mut config = run_config(&dir.0.join("run"), Some(&tiny_llama()), &shards, 1, 0.0);
    config.data.context = 32;
    common::tiny::train(config);
    let out = dir.0.join("export");
    common::tiny::export(&dir.0.join("run"), &out);
    let sharded = dir.0.join("export-sharded");
    common::succeeds(&common::headroom(&[
        "export",
        "--hf",
        "--dtype",
        "bf16",
        "--shard-size",
        "60KB",
        common::text(&dir.0.join("run")),
        common::text(&sharded),
    ]));
    assert!(sharded.join(headroom_nn::hf::INDEX_FILE).exists());
    assert_eq!(
        LlamaConfig::read(&out).unwrap().gpt_config(0.0),
        LlamaConfig::read(&tiny_llama()).unwrap().gpt_config(0.0),
    );
    let device = common::tiny::cpu();
    let load = |dir: &Path| {
        let shape = LlamaConfig::read(dir).unwrap().gpt_config(0.0);
        let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 9), shape).unwrap();
        load_llama(dir, &mut gpt).unwrap();
        gpt.named_parameters()
            .into_iter()
            .map(|(name, t)| (name, t.array().to_bytes().unwrap()))
            .collect::<Vec<_>>()
    };
    let original = load(&tiny_llama());
    assert!(
        load(&out) == original,
        "the f32 export holds the pretrained weights"
    );
    assert!(
        load(&sharded) == original,
        "so does the bf16 one, in shards"
    );
    // The tokenizer travels with it, and its begin and end of text are named.
    assert!(out.join("tokenizer.json").exists());
    let generation: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("generation_config.json")).unwrap())
            .unwrap();
    assert_eq!(generation["bos_token_id"], 318);
    assert_eq!(generation["eos_token_id"], 319);
}

#[test]
fn a_run_from_pretrained_weights_peaks_on_each_tier_as_planned() {
    // The blocks' weights streamed from the host tier and the optimizer there: loading the
    // bf16 shards must leave both tiers as the planner lays them out.
    let dir = TempDir::new("llama-pretrained-tiers");
    let tokenizer = TextTokenizer::load(&tiny_llama()).unwrap();
    let text = corpus(&dir.0, "corpus.txt", 4);
    let shards = shards(&tokenizer, &text, dir.0.join("shards"));
    let mut config = run_config(&dir.0.join("run"), Some(&tiny_llama()), &shards, 2, 1e-3);
    config.data.context = 32;
    config.batch.micro = None;
    config.model.recompute = Some(Recompute::Blocks);
    config.model.offload_weights = Some(true);
    config.optimizer.offload = Some(true);
    let mut trainer = Trainer::new(config).unwrap();
    for _ in 0..2 {
        trainer.train_step().unwrap();
    }
    let plan = trainer.plan().unwrap();
    let device = trainer.device().allocator().stats();
    let host = trainer.host_tier().unwrap().allocator().stats();
    assert_eq!(device.peak_in_use, plan.predicted_peak, "{plan}");
    assert_eq!(Some(host.peak_in_use), plan.predicted_host_peak, "{plan}");
}
