//! Gemma 3 through the trainer: its peak is predicted exactly under every memory technique
//! (the sliding window counted as the kernels run it), and `--init-from` the tiny Gemma 3 made
//! with transformers (nn/tests/data/tiny-gemma3) takes its family and options, trains from its
//! weights and exports them again.

mod common;

use std::path::{Path, PathBuf};

use common::tiny::{configured, corpus, run_config, shards};
use common::{TempDir, small_config};
use headroom_kernels::DType;
use headroom_nn::hf::{Gemma3Config, load_llama};
use headroom_nn::{Family, Gpt, Initializer, Module};
use headroom_trainer::Trainer;
use headroom_trainer::config::{ModelFamily, Overrides, PrecisionKind, Recompute, TrainConfig};
use headroom_trainer::data::tokenizer::TextTokenizer;

fn tiny_gemma3() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn/tests/data/tiny-gemma3")
}

/// The tiny Llama 3's tokenizer: its vocabulary of 320 is the tiny Gemma 3's too.
fn tokenizer() -> TextTokenizer {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn/tests/data/tiny-llama3");
    TextTokenizer::load(&dir).unwrap()
}

/// A small Gemma 3: 4 query heads sharing 2, a window of 4 on every other layer.
fn gemma3_config(dir: &TempDir) -> TrainConfig {
    let mut config = small_config(dir);
    let model = &mut config.model;
    model.family = ModelFamily::Gemma3;
    (model.width, model.heads, model.layers) = (32, 4, 2);
    model.kv_heads = Some(2);
    model.mlp_width = Some(48);
    model.sliding_window = Some(4);
    model.sliding_window_pattern = Some(2);
    config
}

#[test]
fn a_gemma3_step_peaks_where_the_planner_predicts_under_every_technique() {
    let dir = TempDir::new("gemma3-plan");
    for (recompute, precision) in [
        (Recompute::None, PrecisionKind::F32),
        (Recompute::Cheap, PrecisionKind::F32),
        (Recompute::Blocks, PrecisionKind::F32),
        (Recompute::BlocksTiled, PrecisionKind::F32),
        (Recompute::None, PrecisionKind::Bf16),
        (Recompute::Cheap, PrecisionKind::Bf16),
        (Recompute::BlocksTiled, PrecisionKind::Bf16),
    ] {
        let mut config = gemma3_config(&dir);
        config.batch.micro = None;
        config.model.recompute = Some(recompute);
        config.precision.dtype = precision;
        let mut trainer = Trainer::builder()
            .config(config)
            .overwrite()
            .build()
            .unwrap();
        let plan = trainer.plan().unwrap().clone();
        let report = trainer.train_step().unwrap();
        assert!(report.loss.is_finite());
        let measured = trainer.device().allocator().stats().peak_in_use;
        assert_eq!(
            measured, plan.predicted_peak,
            "{recompute:?} {precision:?}: {plan}"
        );
    }
}

#[test]
fn init_from_a_gemma3_directory_takes_its_family_and_options() {
    let config = configured(&tiny_gemma3(), Overrides::default()).unwrap();
    let model = &config.model;
    let published = Gemma3Config::read(&tiny_gemma3()).unwrap();
    assert_eq!(model.family, ModelFamily::Gemma3);
    assert_eq!((model.layers, model.width, model.heads), (3, 32, 4));
    assert!(model.tie_embeddings);
    assert_eq!(model.family_parts(), Family::Gemma3(published.options));
    config.validate().unwrap();
    // A setting of another family is refused, naming it.
    let mut llama_only = config.clone();
    llama_only.model.qk_norm = true;
    let err = llama_only.validate().unwrap_err();
    assert!(err.to_string().contains("model.qk_norm"), "{err}");
}

#[test]
fn a_run_trains_the_pretrained_gemma3_weights_and_exports_them() {
    let dir = TempDir::new("gemma3-run");
    let text = corpus(&dir.0, "corpus.txt", 3);
    let shards = shards(&tokenizer(), &text, dir.0.join("shards"));
    let mut config = run_config(&dir.0.join("run"), Some(&tiny_gemma3()), &shards, 1, 1e-3);
    config.data.context = 32;
    let mut trainer = Trainer::new(config.clone()).unwrap();
    let report = trainer.train_step().unwrap();
    // The same batch through the tiny model loaded by hand.
    let shape = Gemma3Config::read(&tiny_gemma3()).unwrap().gpt_config(0.0);
    let device = common::tiny::cpu();
    let load = |dir: &Path| {
        let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 1), shape).unwrap();
        load_llama(dir, &mut gpt).unwrap();
        gpt
    };
    let gpt = load(&tiny_gemma3());
    let want = common::tiny::batch_loss(&trainer, &report.indices, &gpt);
    assert!(
        (report.loss - want).abs() <= 1e-5 * want,
        "the run's first loss {}, the tiny model's {want}",
        report.loss
    );
    drop(trainer);
    // A learning rate of 0: the export holds the pretrained weights.
    let mut frozen = run_config(&dir.0.join("frozen"), Some(&tiny_gemma3()), &shards, 1, 0.0);
    frozen.data.context = 32;
    common::tiny::train(frozen);
    let out = dir.0.join("export");
    common::tiny::export(&dir.0.join("frozen"), &out);
    let bytes = |gpt: &Gpt| {
        gpt.named_parameters()
            .into_iter()
            .map(|(name, t)| (name, t.array().to_bytes().unwrap()))
            .collect::<Vec<_>>()
    };
    assert!(
        bytes(&load(&out)) == bytes(&gpt),
        "the export holds the pretrained weights"
    );
    assert_eq!(Gemma3Config::read(&out).unwrap().gpt_config(0.0), shape);
}
