//! The planner: the peak it predicts on the meta device is the peak the first real step hits,
//! and it picks the largest micro-batch that fits the limit with the margin.

mod common;

use common::{TempDir, resume, small_config};
use headroom_trainer::Trainer;
use headroom_trainer::config::PolicyKind;
use headroom_trainer::config::{Recompute, StateKind};

#[test]
fn the_predicted_peak_is_the_measured_one_and_the_choice_is_the_largest_that_fits() {
    let dir = TempDir::new("plan");
    let mut config = small_config(&dir);
    config.batch.size = 64;
    config.batch.micro = None;
    config.data.train_size = 256;
    // Roomy first, to learn the peak of the whole batch in one micro-batch.
    let mut roomy = Trainer::new(config.clone()).unwrap();
    let plan = roomy.plan().unwrap().clone();
    assert_eq!(
        (plan.micro, plan.probes.len()),
        (64, 1),
        "everything fits at once"
    );
    roomy.train_step().unwrap();
    assert_eq!(
        roomy.device().allocator().stats().peak_in_use,
        plan.predicted_peak
    );
    // Then a limit that holds about half the batch's activations.
    config.memory.limit = Some((plan.predicted_peak * 3 / 4).into());
    let mut tight = Trainer::new(config).unwrap();
    let plan = tight.plan().unwrap().clone();
    assert!(plan.micro > 1 && plan.micro < 64, "{plan}");
    assert!(plan.predicted_peak <= plan.step_limit);
    let larger = plan.probes.iter().filter(|p| p.micro > plan.micro);
    assert!(
        larger.clone().count() > 0 && larger.clone().all(|p| !p.fits),
        "{plan}"
    );
    tight.train_step().unwrap();
    let measured = tight.device().allocator().stats().peak_in_use;
    assert_eq!(measured, plan.predicted_peak, "{plan}");
    assert_eq!(tight.micro_batch(), plan.micro);
}

#[test]
fn recomputed_blocks_fit_a_larger_micro_batch_predicted_as_exactly_and_train_the_same() {
    let dir = TempDir::new("plan-recompute");
    let mut config = small_config(&dir);
    config.model.layers = 3;
    config.batch.size = 64;
    config.batch.micro = None;
    config.data.train_size = 256;
    let roomy = Trainer::new(config.clone()).unwrap();
    let whole = roomy.plan().unwrap().predicted_peak;
    config.memory.limit = Some((whole * 3 / 4).into());

    let mut plans = Vec::new();
    let mut losses = Vec::new();
    for recompute in [Recompute::None, Recompute::Blocks, Recompute::BlocksTiled] {
        let mut config = config.clone();
        config.model.recompute = Some(recompute);
        let mut trainer = Trainer::new(config).unwrap();
        let plan = trainer.plan().unwrap().clone();
        let loss = trainer.train_step().unwrap().loss;
        let measured = trainer.device().allocator().stats().peak_in_use;
        assert_eq!(
            measured, plan.predicted_peak,
            "recompute {recompute:?}: {plan}"
        );
        plans.push(plan);
        losses.push(loss);
    }
    assert!(
        plans[1].micro > plans[0].micro,
        "recomputed: {}, plain: {}",
        plans[1],
        plans[0]
    );
    // Tiled MLPs fit at least what whole MLPs do.
    assert!(
        plans[2].micro >= plans[1].micro,
        "{} against {}",
        plans[2],
        plans[1]
    );
    // The same step in other micro-batches: equal to float tolerance.
    assert!((losses[0] - losses[1]).abs() < 1e-4, "{losses:?}");
    assert!((losses[1] - losses[2]).abs() < 1e-4, "{losses:?}");
}

/// The peak of a step of `config` with one sample per micro-batch, on a roomy limit.
fn one_sample_peak(config: &headroom_trainer::config::TrainConfig) -> u64 {
    let mut config = config.clone();
    config.batch.micro = Some(1);
    config.memory.limit = Some(headroom_alloc::ByteSize::mib(64));
    let mut trainer = Trainer::new(config).unwrap();
    trainer.train_step().unwrap();
    trainer.device().allocator().stats().peak_in_use
}

#[test]
fn the_default_margin_shrinks_when_it_alone_keeps_one_sample_out_and_a_set_one_is_named() {
    let dir = TempDir::new("plan-margin");
    let mut config = small_config(&dir);
    config.batch.micro = None;
    // The margin alone, without a narrower optimizer state to make room.
    config.memory.policy = PolicyKind::Manual;
    let one = one_sample_peak(&config);
    // The smallest limit that one sample's step fits (near its peak; a tight limit lays the
    // allocations out otherwise): not with a tenth of it kept free.
    let trainer = (one / 256..)
        .take(64)
        .find_map(|granules| {
            config.memory.limit = Some((granules * 256).into());
            Trainer::new(config.clone()).ok()
        })
        .expect("a limit near one sample's peak fits it");
    let limit = trainer.plan().unwrap().step_limit as f64 / (1.0 - trainer.plan().unwrap().margin);
    assert!(
        limit * 0.9 < one as f64,
        "{limit} leaves room for one sample with the margin"
    );
    let plan = trainer.plan().unwrap();
    assert!(plan.margin_shrunk && plan.margin < 0.1, "{plan}");
    assert!(
        plan.micro >= 1 && plan.predicted_peak <= plan.step_limit,
        "{plan}"
    );
    assert!(plan.to_string().contains("shrunk"), "{plan}");
    drop(trainer);
    config.batch.margin = Some(0.1);
    let err = Trainer::new(config).err().unwrap().to_string();
    assert!(
        err.contains("batch.margin") && !err.contains("not even a micro-batch"),
        "{err}"
    );
}

#[test]
fn the_micro_batch_grows_only_to_what_the_planner_predicts_fits() {
    let dir = TempDir::new("plan-growth");
    let (_, mut tight, _) = common::tight_limit(&dir, 8);
    tight.batch.micro = None;
    tight.batch.grow_after = 1;
    let mut trainer = Trainer::new(tight).unwrap();
    let planned = trainer.plan().unwrap().micro;
    assert!(planned < 32, "the batch does not fit at once");
    for _ in 0..8 {
        let report = trainer.train_step().unwrap();
        assert!(
            report.ooms.is_empty(),
            "a growth the planner foresaw failing"
        );
    }
    assert_eq!(trainer.micro_batch(), planned);
    // Where a larger size does fit, it grows there.
    let roomy_dir = TempDir::new("plan-growth-roomy");
    let mut roomy = small_config(&roomy_dir);
    roomy.batch.micro = Some(2);
    roomy.batch.grow_after = 1;
    let mut trainer = Trainer::new(roomy).unwrap();
    for _ in 0..3 {
        trainer.train_step().unwrap();
    }
    assert_eq!(trainer.micro_batch(), 8, "2, 4, then the whole batch");
}

#[test]
fn a_limit_below_the_training_state_gets_the_diagnosis_with_a_fixed_micro_batch_or_a_resume() {
    let dir = TempDir::new("plan-state");
    let config = small_config(&dir);
    Trainer::new(config.clone()).unwrap().run(false).unwrap();
    let mut tiny = config.clone();
    tiny.memory.limit = Some(headroom_alloc::ByteSize::kib(16));
    for err in [
        resume(tiny.clone()).err().unwrap(),
        Trainer::builder()
            .config(tiny)
            .overwrite()
            .build()
            .err()
            .unwrap(),
    ] {
        let text = err.to_string();
        assert!(
            matches!(err, headroom_trainer::Error::DoesNotFit { .. }),
            "{text}"
        );
        for words in ["do not fit", "optimizer state", "suggestion"] {
            assert!(text.contains(words), "`{words}` not in {text}");
        }
        assert!(!text.contains("reduce the batch"), "{text}");
    }
    assert!(
        headroom_trainer::run_dir::checkpoint_path(&dir.0).exists(),
        "an overwrite that could not start destroyed nothing"
    );
}

#[test]
fn the_data_fixes_the_vocabulary_and_a_preset_context_holds_its_samples() {
    use headroom_trainer::config::{DataKind, ModelConfig, Preset};
    let dir = TempDir::new("plan-vocab");
    let mut config = small_config(&dir);
    config.model = ModelConfig {
        width: 16,
        heads: 2,
        layers: 1,
        tie_embeddings: true,
        ..ModelConfig::preset(Preset::named("gpt2").unwrap())
    };
    // Addition's 13 tokens win over GPT-2's vocabulary; its samples fit GPT-2's 1024 positions.
    let trainer = Trainer::new(config.clone()).unwrap();
    let Some(headroom_trainer::model::TrainModel::Gpt(gpt)) = trainer.builtin_model() else {
        panic!("a GPT")
    };
    assert_eq!((gpt.config().vocab, gpt.config().context), (13, 1024));
    assert!(gpt.head.is_none(), "the preset ties the head");
    drop(trainer);
    let mut explicit = config.clone();
    explicit.model.vocab = Some(50257);
    let err = Trainer::new(explicit).err().unwrap().to_string();
    assert!(
        err.contains("model.vocab: 50257") && err.contains("13"),
        "{err}"
    );
    let mut short = config.clone();
    short.model.context = Some(4);
    let err = Trainer::new(short).err().unwrap().to_string();
    assert!(err.contains("model.context: 4"), "{err}");
    // Uniform tokens take the model's vocabulary and context.
    let mut uniform = config;
    uniform.data.kind = DataKind::UniformTokens;
    uniform.model.context = Some(32);
    let trainer = Trainer::new(uniform).unwrap();
    let Some(headroom_trainer::model::TrainModel::Gpt(gpt)) = trainer.builtin_model() else {
        panic!("a GPT")
    };
    assert_eq!((gpt.config().vocab, gpt.config().context), (50257, 32));
}

#[test]
fn the_plan_says_which_layers_hold_the_activations() {
    let dir = TempDir::new("plan-kinds");
    let mut config = small_config(&dir);
    config.batch.micro = None;
    let peaks = |recompute: Recompute| {
        let mut config = config.clone();
        config.model.recompute = Some(recompute);
        let trainer = Trainer::new(config).unwrap();
        let plan = trainer.plan().unwrap().clone();
        let peak = |tag: &str| {
            plan.peak_by_tag
                .iter()
                .find(|t| t.tag == tag)
                .map_or(0, |t| t.peak)
        };
        for kind in ["embedding", "norm", "attention", "mlp", "head"] {
            assert!(peak(&format!("activations/{kind}")) > 0, "{kind}: {plan}");
        }
        assert!(plan.to_string().contains("activations/attention"), "{plan}");
        // The tape's account, per op: no op saves more than the activations' peak.
        let saved = |op: &str| {
            plan.saved_by_op
                .iter()
                .find(|o| o.op == op)
                .map(|o| o.bytes)
        };
        assert!(saved("scaled_dot_product_attention").is_some(), "{plan}");
        let activations: u64 = plan
            .peak_by_tag
            .iter()
            .filter(|t| t.tag.starts_with("activations"))
            .map(|t| t.peak)
            .sum();
        let total: u64 = plan.saved_by_op.iter().map(|o| o.bytes).sum();
        assert!(
            0 < total && total <= activations,
            "{total} of {activations}"
        );
        assert!(
            plan.to_string()
                .contains("saves for its backward pass, by op")
        );
        (peak("activations/norm"), peak("weights"), saved("gelu"))
    };
    let (norms, weights, gelu) = peaks(Recompute::None);
    let (cheap_norms, cheap_weights, cheap_gelu) = peaks(Recompute::Cheap);
    assert_eq!(weights, cheap_weights);
    // Cheap recomputation keeps no block's norm output: only the final norm's is left. Nor
    // does it keep the GELU's output, which the next product's op recomputes.
    assert!(cheap_norms < norms, "{cheap_norms} against {norms}");
    assert!(
        gelu.is_some() && cheap_gelu.is_none(),
        "{gelu:?}, {cheap_gelu:?}"
    );
}

#[test]
fn the_planner_grows_the_heads_chunk_into_what_the_micro_batch_leaves_and_a_resume_keeps_it() {
    use headroom_trainer::config::{DataKind, ModelConfig, Preset};
    let dir = TempDir::new("plan-chunk");
    let mut config = small_config(&dir);
    // GPT-2's vocabulary on a tiny body: the head's logits are most of a step.
    config.model = ModelConfig {
        width: 16,
        heads: 2,
        layers: 1,
        context: Some(32),
        ..ModelConfig::preset(Preset::named("gpt2").unwrap())
    };
    config.data.kind = DataKind::UniformTokens;
    config.batch.micro = None;
    config.batch.margin = Some(0.0);
    config.memory.limit = Some(headroom_alloc::ByteSize::gib(2));
    let chunk = |trainer: &Trainer| match trainer.builtin_model() {
        Some(headroom_trainer::model::TrainModel::Gpt(gpt)) => gpt.head_chunk(),
        _ => panic!("a GPT"),
    };
    // Roomy: 8 samples of 32 tokens in one micro-batch with the largest chunk, 166 rows (8 Mi
    // logits): that one probe settles both.
    let roomy = Trainer::new(config.clone()).unwrap();
    let plan = roomy.plan().unwrap().clone();
    let tried: Vec<(usize, bool)> = plan.chunk_probes.iter().map(|c| (c.rows, c.fits)).collect();
    assert_eq!(tried, [(166, true)], "{plan}");
    assert_eq!(
        (plan.micro, plan.head_chunk, chunk(&roomy)),
        (8, Some(166), Some(166))
    );
    // Each chunk's peak, planned with the chunk set.
    let peak_of = |rows: usize| {
        let mut fixed = config.clone();
        fixed.model.head_chunk = Some(rows);
        let trainer = Trainer::builder()
            .config(fixed)
            .overwrite()
            .build()
            .unwrap();
        trainer.plan().unwrap().predicted_peak
    };
    let (peak_40, peak_80, peak_160) = (peak_of(40), peak_of(80), peak_of(160));
    assert!(
        peak_40 < peak_80 && peak_80 < peak_160,
        "{peak_40} {peak_80} {peak_160}"
    );
    drop(roomy);

    // A limit below chunks of 160 rows: the micro-batch stays whole, and the chunk grows
    // until a chunk does not fit (in use, or in what the allocator reserves for it). The
    // first step peaks where the plan says.
    config.memory.limit = Some(((peak_80 + peak_160) / 2).into());
    config.checkpoint.every = 1;
    let mut tight = Trainer::builder()
        .config(config.clone())
        .overwrite()
        .build()
        .unwrap();
    let plan = tight.plan().unwrap().clone();
    let (last, tried) = plan.chunk_probes.split_last().unwrap();
    assert!(!last.fits && tried.iter().all(|c| c.fits), "{plan}");
    let chosen = tried.last().map_or(20, |c| c.rows);
    assert!(chosen < 160, "{plan}");
    assert_eq!((plan.micro, plan.head_chunk), (8, Some(chosen)), "{plan}");
    assert_eq!(chunk(&tight), Some(chosen));
    let line = format!("{chosen} rows at a time");
    assert!(plan.to_string().contains(&line), "{plan}");
    tight.train_step().unwrap();
    let measured = tight.device().allocator().stats().peak_in_use;
    assert_eq!(measured, plan.predicted_peak, "{plan}");
    tight.save_checkpoint().unwrap();
    drop(tight);

    // Resumed with room to spare, it chunks as the run it continues did.
    config.memory.limit = Some(headroom_alloc::ByteSize::gib(2));
    let resumed = resume(config).unwrap();
    assert_eq!(chunk(&resumed), Some(chosen));
}

#[test]
fn the_training_state_techniques_are_predicted_as_exactly_as_the_rest() {
    let dir = TempDir::new("plan-state");
    for (state, in_backward) in [
        (StateKind::Bf16, false),
        (StateKind::Int8, false),
        (StateKind::F32, true),
        (StateKind::Int8, true),
    ] {
        let mut config = small_config(&dir);
        config.batch.micro = None;
        config.model.width = 64;
        config.model.layers = 2;
        config.optimizer.clip = 0.0;
        config.optimizer.state = Some(state);
        config.optimizer.in_backward = Some(in_backward);
        let mut trainer = Trainer::builder()
            .config(config)
            .overwrite()
            .build()
            .unwrap();
        let plan = trainer.plan().unwrap().clone();
        trainer.train_step().unwrap();
        let measured = trainer.device().allocator().stats().peak_in_use;
        assert_eq!(
            measured, plan.predicted_peak,
            "{state:?} in backward {in_backward}: {plan}"
        );
    }
}
