//! LoRA through the trainer (`[model.lora]`): a step peaks where the planner predicts, the
//! checkpoint holds the adapters alone and a resumed run equals one never stopped, and
//! `headroom export` writes PEFT's adapter directory (which `--init-from` starts from again)
//! or, with `--merge`, the merged model.

mod common;

use std::path::Path;

use common::tiny::{cpu, export, run_config, tiny, tiny_shards, train};
use common::{
    TempDir, assert_recovers_like, assert_same_checkpoints, checkpoint_bytes, headroom, resume,
    small_config, succeeds, text, tight_limit_of,
};
use headroom_autograd::Tensor;
use headroom_kernels::DType;
use headroom_kernels::ops::gemm::cpu_multiplies;
use headroom_nn::hf::{self, Gpt2Config};
use headroom_nn::lora::{self, LoraConfig, LoraTargets, QuantizedBase};
use headroom_nn::{Gpt, Initializer, Module};
use headroom_trainer::Trainer;
use headroom_trainer::config::{ModelFamily, Overrides, PrecisionKind, Recompute, TrainConfig};

fn adapters(rank: usize) -> LoraConfig {
    LoraConfig {
        rank,
        alpha: 2.0 * rank as f64,
        ..LoraConfig::default()
    }
}

/// A small Llama with adapters on four of its layers, under `recompute` and `precision` (and
/// adapter dropout `dropout`), its base stored as `base` says.
fn small_lora(
    dir: &TempDir,
    recompute: Recompute,
    precision: PrecisionKind,
    dropout: f64,
    base: Option<QuantizedBase>,
) -> TrainConfig {
    let mut config = small_config(dir);
    let model = &mut config.model;
    model.family = ModelFamily::Llama;
    (model.width, model.heads, model.layers) = (32, 4, 2);
    model.kv_heads = Some(2);
    model.mlp_width = Some(48);
    model.recompute = Some(recompute);
    model.lora = Some(LoraConfig {
        dropout,
        targets: LoraTargets::Names(vec![
            "q_proj".into(),
            "v_proj".into(),
            "down_proj".into(),
            "gate_proj".into(),
        ]),
        base,
        ..adapters(4)
    });
    config.batch.micro = None;
    config.precision.dtype = precision;
    config
}

/// Trains one step of [`small_lora`] and checks that it peaks at the planned bytes.
fn assert_step_peaks_as_planned(
    dir: &TempDir,
    recompute: Recompute,
    precision: PrecisionKind,
    dropout: f64,
    base: Option<QuantizedBase>,
) {
    let config = small_lora(dir, recompute, precision, dropout, base);
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
        "{recompute:?} {precision:?} {base:?}: {plan}"
    );
}

#[test]
fn a_lora_step_peaks_where_the_planner_predicts_under_every_technique() {
    let dir = TempDir::new("lora-plan");
    for recompute in [
        Recompute::None,
        Recompute::Cheap,
        Recompute::CheapUp,
        Recompute::Blocks,
    ] {
        for (precision, dropout) in [(PrecisionKind::F32, 0.0), (PrecisionKind::Bf16, 0.1)] {
            assert_step_peaks_as_planned(&dir, recompute, precision, dropout, None);
        }
    }
}

#[test]
fn a_qlora_step_peaks_where_the_planner_predicts() {
    let dir = TempDir::new("qlora-plan");
    for recompute in [Recompute::None, Recompute::Cheap, Recompute::Blocks] {
        for (base, precision) in [
            (QuantizedBase::Nf4, PrecisionKind::Bf16),
            (QuantizedBase::Int8, PrecisionKind::F32),
        ] {
            assert_step_peaks_as_planned(&dir, recompute, precision, 0.0, Some(base));
        }
    }
}

#[test]
fn a_qlora_run_out_of_memory_recovers_like_one_with_room() {
    let dir = TempDir::new("qlora-oom");
    let base = Some(QuantizedBase::Nf4);
    let config = small_lora(&dir, Recompute::None, PrecisionKind::F32, 0.0, base);
    let (roomy, tight, limit) = tight_limit_of(config, 3);
    let mut free = Trainer::new(roomy).unwrap();
    let mut constrained = Trainer::new(tight).unwrap();
    assert_recovers_like(&mut free, &mut constrained, 3, limit, 1e-4);
}

fn lora_run(run: &Path, shards: &Path, steps: u64) -> TrainConfig {
    let mut config = run_config(run, Some(&tiny()), shards, steps, 1e-2);
    config.model.lora = Some(adapters(4));
    config
}

#[test]
fn the_checkpoint_holds_the_adapters_alone_and_a_resumed_run_equals_one_never_stopped() {
    let dir = TempDir::new("lora-resume");
    let shards = tiny_shards(&dir);
    let run = dir.0.join("run");
    let config = lora_run(&run, &shards, 3);
    let mut stopped = Trainer::new(config.clone()).unwrap();
    stopped.train_step().unwrap();
    stopped.train_step().unwrap();
    stopped.save_checkpoint().unwrap();
    drop(stopped);
    let names: Vec<String> = checkpoint_bytes(&run).into_iter().map(|(n, _)| n).collect();
    let params: Vec<&String> = names
        .iter()
        .filter(|n| !n.starts_with("optimizer"))
        .collect();
    assert!(!params.is_empty());
    for name in &names {
        assert!(lora::is_adapter_name(name), "{name} is in the checkpoint");
    }
    let mut resumed = resume(config.clone()).unwrap();
    assert_eq!(resumed.steps_done(), 2);
    resumed.run(false).unwrap();
    let straight = dir.0.join("straight");
    train(lora_run(&straight, &shards, 3));
    assert_same_checkpoints(&run, &straight);
}

/// The tiny GPT-2 with the adapters of the PEFT directory `adapter` (whose base it names).
fn with_adapters(adapter: &Path) -> Gpt {
    let base = hf::adapter_base(adapter).unwrap();
    let config = Gpt2Config::read(&base).unwrap().gpt_config(0.0);
    let mut gpt = Gpt::new(&mut Initializer::new(&cpu(), DType::F32, 0), config).unwrap();
    hf::load_gpt2(&base, &mut gpt).unwrap();
    hf::load_peft(adapter, &mut gpt).unwrap();
    gpt.set_training(false);
    gpt
}

fn logits(gpt: &Gpt) -> Vec<f64> {
    let ids: Vec<u32> = (0..12).map(|i| (i * 37 + 5) % 300).collect();
    let ids = Tensor::from_host(gpt.tok_emb.weight.device(), [2, 6], &ids).unwrap();
    gpt.forward(&ids).unwrap().to_f64().unwrap()
}

#[test]
fn export_writes_peft_adapters_and_merge_the_merged_model() {
    let dir = TempDir::new("lora-export");
    let shards = tiny_shards(&dir);
    let run = dir.0.join("run");
    train(lora_run(&run, &shards, 2));
    let adapter = dir.0.join("adapter");
    export(&run, &adapter);
    assert!(adapter.join(hf::ADAPTER_CONFIG).is_file());
    let read = hf::PeftAdapter::read(&adapter).unwrap();
    assert_eq!((read.lora.rank, read.lora.scale()), (4, 2.0));
    let adapted = with_adapters(&adapter);
    let merged_dir = dir.0.join("merged");
    succeeds(&headroom(&[
        "export",
        "--hf",
        "--merge",
        text(&run),
        text(&merged_dir),
    ]));
    let config = Gpt2Config::read(&merged_dir).unwrap().gpt_config(0.0);
    let mut merged = Gpt::new(&mut Initializer::new(&cpu(), DType::F32, 0), config).unwrap();
    hf::load_gpt2(&merged_dir, &mut merged).unwrap();
    let (a, m) = (logits(&adapted), logits(&merged));
    let diff = a
        .iter()
        .zip(&m)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    assert!(diff < 1e-4, "merged logits off by {diff}");
    let config = Gpt2Config::read(&tiny()).unwrap().gpt_config(0.0);
    let mut pretrained = Gpt::new(&mut Initializer::new(&cpu(), DType::F32, 0), config).unwrap();
    hf::load_gpt2(&tiny(), &mut pretrained).unwrap();
    let moved = logits(&pretrained)
        .iter()
        .zip(&a)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    assert!(moved > 1e-5, "two steps moved the logits by {moved}");
    // A run from the adapter directory trains its adapters, as its configuration shapes them,
    // from their values, over its base.
    let config = run_config(&dir.0.join("again"), Some(&adapter), &shards, 1, 0.0);
    assert_eq!(config.model.lora.as_ref().map(|l| l.rank), Some(4));
    // Asking for the base's storage alone keeps the adapter's shape.
    let quantized = Overrides {
        base: Some(QuantizedBase::Int8),
        ..Overrides::default()
    };
    let lora = common::tiny::configured(&adapter, quantized)
        .unwrap()
        .model
        .lora
        .unwrap();
    assert_eq!((lora.rank, lora.base), (4, Some(QuantizedBase::Int8)));
    let trainer = Trainer::new(config).unwrap();
    let gpt = trainer
        .model()
        .as_any()
        .downcast_ref::<headroom_trainer::model::TrainModel>();
    let Some(headroom_trainer::model::TrainModel::Gpt(gpt)) = gpt else {
        panic!("a GPT")
    };
    let mut gpt = gpt.as_ref().clone();
    gpt.set_training(false);
    assert_eq!(logits(&gpt), a);
}

#[test]
fn a_plan_that_fits_no_full_fine_tune_names_the_lora_run_that_fits() {
    use headroom_trainer::config::{DataKind, Overrides, Preset};
    use headroom_trainer::data::Task;
    use headroom_trainer::planning::{advise, plan, run_device};
    let mut config = Overrides {
        preset: Some(Preset::named("smollm2-135m").unwrap()),
        context: Some(256),
        batch_size: Some(1),
        memory_limit: Some(headroom_alloc::ByteSize::mib(600)),
        ..Overrides::default()
    }
    .configure(None)
    .unwrap();
    config.data.kind = DataKind::UniformTokens;
    // Four of its blocks, the head apart from the embedding (which QLoRA stores quantized
    // too): planned in a fraction of a second.
    config.model.layers = 4;
    config.model.tie_embeddings = false;
    // Without the host tier, which would hold the full fine-tune's optimizer.
    config.optimizer.offload = Some(false);
    let task = Task::from_config(&config.data, &config.model, config.seed).unwrap();
    let (budget, target, _) = run_device::planning(&config).unwrap();
    let err = plan(&config, &task, &budget, target).unwrap_err();
    assert!(
        matches!(err, headroom_trainer::Error::DoesNotFit { .. }),
        "{err}"
    );
    let advice = advise(&config, &task, &budget, target, err)
        .unwrap()
        .to_string();
    // The line of the run that `flags` ask for.
    let line = |advice: &str, flags: &str| -> String {
        advice
            .lines()
            .find(|l| l.starts_with(&format!("suggestion: {flags} (")))
            .unwrap_or_else(|| panic!("no {flags} in: {advice}"))
            .to_owned()
    };
    let lora = line(&advice, "--lora --param-dtype bf16");
    // QLoRA too, with less.
    let qlora = line(&advice, "--base nf4 --param-dtype bf16");
    // The run it names does fit, as the line says.
    config.model.lora = Some(LoraConfig::default());
    config.model.param_dtype = headroom_trainer::config::ParamDtype::Bf16;
    let fits = plan(&config, &task, &budget, target).unwrap();
    let figures = format!(
        "micro-batches of {}, predicted peak {}",
        fits.micro,
        headroom_alloc::format_bytes(fits.predicted_peak)
    );
    assert!(lora.contains(&figures), "{lora}");
    // Under a limit LoRA over a bf16 base does not fit, the plan names QLoRA, which does. On a
    // CPU that multiplies bf16 as stored, that is the bf16 base's weights alone (no policy
    // makes them smaller); where products widen to f32, both runs need more.
    let weights = fits
        .peak_by_tag
        .iter()
        .find(|t| t.tag == "weights")
        .unwrap()
        .live;
    config.memory.limit = Some(if cpu_multiplies(DType::BF16) {
        headroom_alloc::ByteSize::from(weights)
    } else {
        headroom_alloc::ByteSize::mib(250)
    });
    let (budget, target, _) = run_device::planning(&config).unwrap();
    let err = plan(&config, &task, &budget, target).unwrap_err();
    let advice = advise(&config, &task, &budget, target, err)
        .unwrap()
        .to_string();
    assert!(!advice.contains("suggestion: --lora"), "{advice}");
    // The parameters are bf16 already: QLoRA is asked for without saying so again.
    let qlora_now = line(&advice, "--base nf4");
    config.model.lora = Some(LoraConfig {
        base: Some(QuantizedBase::Nf4),
        ..LoraConfig::default()
    });
    let fits = plan(&config, &task, &budget, target).unwrap();
    assert!(
        qlora_now.contains(&format!("micro-batches of {}", fits.micro)),
        "{qlora_now}"
    );
    assert!(qlora != qlora_now, "a lower limit, other figures: {qlora}");
}
