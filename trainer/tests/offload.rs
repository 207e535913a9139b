//! The host tier: a step that keeps its recomputed blocks' inputs there, or its optimizer's
//! state and updates (ZeRO-Offload), peaks on each tier where the planner predicts and equals
//! the step that keeps them on the device; a host tier too small is reported as the host
//! tier's out-of-memory.

mod common;

use common::{TempDir, small_config};
use headroom_trainer::Trainer;
use headroom_trainer::config::{
    DataKind, ModelFamily, PolicyKind, PrecisionKind, Recompute, StateKind, TrainConfig,
};

/// A small Llama-family run over sequences of 128 uniform tokens, whose activations outweigh
/// its weights, in micro-batches the planner sizes.
fn config(dir: &TempDir) -> TrainConfig {
    let mut config = small_config(dir);
    config.data.kind = DataKind::UniformTokens;
    let model = &mut config.model;
    model.family = ModelFamily::Llama;
    (model.width, model.heads, model.layers) = (32, 4, 3);
    (model.vocab, model.context) = (Some(64), Some(128));
    model.kv_heads = Some(2);
    model.mlp_width = Some(96);
    config.batch.micro = None;
    config
}

/// A trainer of `config` after two steps, and their losses.
fn two_steps(config: TrainConfig) -> (Trainer, Vec<f64>) {
    let mut trainer = Trainer::builder()
        .config(config)
        .overwrite()
        .build()
        .unwrap();
    let losses: Vec<f64> = (0..2).map(|_| trainer.train_step().unwrap().loss).collect();
    (trainer, losses)
}

/// Every parameter's values, in the model's order.
fn weights(trainer: &Trainer) -> Vec<Vec<f64>> {
    let params = trainer.model().module().parameters();
    params.iter().map(|p| p.to_f64().unwrap()).collect()
}

/// Bytes live under `tag` in `stats`.
fn live(stats: &headroom_alloc::Stats, tag: headroom_alloc::Tag) -> u64 {
    let tags = stats.tags.iter().filter(|t| t.tag == tag);
    tags.map(|t| t.live).sum()
}

/// Checks that both tiers of `trainer`'s run peaked at its plan's predictions; returns their
/// statistics.
fn peaks_as_planned(
    trainer: &Trainer,
    case: &str,
) -> (headroom_alloc::Stats, headroom_alloc::Stats) {
    let plan = trainer.plan().unwrap();
    let device = trainer.device().allocator().stats();
    assert_eq!(device.peak_in_use, plan.predicted_peak, "{case}: {plan}");
    let host = trainer.host_tier().unwrap().allocator().stats();
    assert_eq!(
        Some(host.peak_in_use),
        plan.predicted_host_peak,
        "{case}: {plan}"
    );
    (device, host)
}

/// Asserts that the run that offloads took the steps of the run that `kept` everything on
/// the device, to the bit (its losses and weights), and peaked on each tier as planned; its
/// peaks.
fn same_steps_as_planned(
    (kept, kept_losses): (&Trainer, &[f64]),
    (offloaded, losses): (&Trainer, &[f64]),
    case: &str,
) -> (headroom_alloc::Stats, headroom_alloc::Stats) {
    assert_eq!(losses, kept_losses, "{case}: the same steps");
    assert!(
        weights(kept) == weights(offloaded),
        "{case}: the weights differ"
    );
    peaks_as_planned(offloaded, case)
}

#[test]
fn offloaded_block_inputs_peak_on_each_tier_as_planned_and_train_the_same() {
    let dir = TempDir::new("offload");
    for (recompute, precision) in [
        (Recompute::Blocks, PrecisionKind::F32),
        (Recompute::BlocksTiled, PrecisionKind::Bf16),
    ] {
        let mut config = config(&dir);
        config.model.recompute = Some(recompute);
        config.precision.dtype = precision;
        let mut kept = Trainer::builder()
            .config(config.clone())
            .overwrite()
            .build()
            .unwrap();
        let kept_loss = kept.train_step().unwrap().loss;
        let kept_peak = kept.device().allocator().stats().peak_in_use;
        assert!(kept.host_tier().is_none());

        config.model.offload_activations = Some(true);
        let mut offloaded = Trainer::builder()
            .config(config)
            .overwrite()
            .build()
            .unwrap();
        let plan = offloaded.plan().unwrap().clone();
        let loss = offloaded.train_step().unwrap().loss;
        let case = format!("{recompute:?} {precision:?}");
        assert_eq!(loss, kept_loss, "{case}: the same step");
        let device_peak = offloaded.device().allocator().stats().peak_in_use;
        assert_eq!(device_peak, plan.predicted_peak, "{case}: {plan}");
        let host = offloaded.host_tier().unwrap().allocator().stats();
        assert_eq!(
            Some(host.peak_in_use),
            plan.predicted_host_peak,
            "{case}: {plan}"
        );
        assert!(host.peak_in_use > 0 && host.in_use == 0, "{case}: {host:?}");
        let summary = offloaded.summary(None);
        assert_eq!(summary.host_peak, Some(host.peak_in_use), "{case}");
        assert!(
            summary.to_string().contains("host tier: peak"),
            "{case}: {summary}"
        );
        assert!(
            device_peak < kept_peak,
            "{case}: {device_peak} against {kept_peak}"
        );
    }
}

#[test]
fn a_host_tier_too_small_is_reported_as_the_host_tiers_out_of_memory() {
    let dir = TempDir::new("offload-small");
    let mut config = config(&dir);
    config.model.recompute = Some(Recompute::Blocks);
    config.model.offload_activations = Some(true);
    config.batch.micro = Some(8);
    config.memory.host_limit = Some(headroom_alloc::ByteSize::kib(1));
    let err = Trainer::builder()
        .config(config)
        .overwrite()
        .build()
        .and_then(|mut t| t.train_step().map(drop))
        .unwrap_err();
    let message = err.to_string();
    assert!(err.oom_report().is_some(), "{message}");
    assert!(
        message.contains("the host tier ran out of memory")
            && message.contains("1.00 KiB limit")
            && message.contains("--host-limit"),
        "{message}"
    );
}

#[test]
fn offloading_needs_whole_blocks_recomputed() {
    let dir = TempDir::new("offload-config");
    let mut config = config(&dir);
    config.model.offload_activations = Some(true);
    config.model.recompute = Some(Recompute::Cheap);
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("model.offload_activations"), "{err}");
    // Unset, the policy recomputes whole blocks.
    config.model.recompute = None;
    let mut trainer = Trainer::builder()
        .config(config)
        .overwrite()
        .build()
        .unwrap();
    trainer.train_step().unwrap();
    let chosen = trainer.config().model.recompute.unwrap();
    assert!(chosen >= Recompute::Blocks, "{chosen:?}");
}

#[test]
fn an_offloaded_optimizer_peaks_on_each_tier_as_planned_and_trains_the_same() {
    let dir = TempDir::new("offload-optimizer");
    for (in_backward, state, activations) in [
        (false, StateKind::F32, false),
        (true, StateKind::Int8, true),
    ] {
        let mut config = config(&dir);
        config.model.recompute = Some(Recompute::Blocks);
        config.model.offload_activations = Some(activations);
        config.optimizer.clip = 0.0;
        config.optimizer.in_backward = Some(in_backward);
        config.optimizer.state = Some(state);
        let (kept, kept_losses) = two_steps(config.clone());
        config.optimizer.offload = Some(true);
        let (offloaded, losses) = two_steps(config);
        let case = format!("in backward {in_backward}, {state:?}, activations {activations}");
        let (device, host) =
            same_steps_as_planned((&kept, &kept_losses), (&offloaded, &losses), &case);
        // The state alone stays on the host between steps, and none of it on the device.
        let state = headroom_alloc::Tag::OPTIMIZER_STATE;
        assert_eq!(live(&device, state), 0, "{case}");
        let kept_state = live(&kept.device().allocator().stats(), state);
        assert_eq!(live(&host, state), kept_state, "{case}");
    }
}

#[test]
fn the_policy_offloads_only_where_nothing_on_the_device_fits() {
    let dir = TempDir::new("offload-policy");
    let mut config = config(&dir);
    config.optimizer.clip = 0.0;
    config.batch.margin = Some(0.0);
    config.memory.limit = Some(headroom_alloc::ByteSize::mib(256));
    let chosen = |config: &TrainConfig| {
        let trainer = Trainer::new(config.clone()).unwrap();
        let plan = trainer.plan().unwrap().clone();
        (plan.policy.clone().unwrap().chosen, plan, trainer)
    };
    let (roomy, ..) = chosen(&config);
    assert!(!roomy.offloads(), "{roomy:?}");
    // The lightest step of one sample on the device, and with the host tier.
    let one_sample = |offload: bool| {
        let mut pinned = config.clone();
        pinned.memory.policy = PolicyKind::Manual;
        pinned.batch.size = 1;
        pinned.model.recompute = Some(Recompute::BlocksTiled);
        pinned.optimizer.in_backward = Some(true);
        pinned.model.offload_activations = Some(offload);
        pinned.optimizer.offload = Some(offload);
        Trainer::new(pinned).unwrap().plan().unwrap().predicted_peak
    };
    let (device_alone, with_host) = (one_sample(false), one_sample(true));
    assert!(
        with_host < device_alone,
        "{with_host} against {device_alone}"
    );
    config.memory.limit = Some(((device_alone + with_host) / 2).into());
    let (tight, plan, mut trainer) = chosen(&config);
    assert!(tight.offloads() && tight.state == StateKind::F32, "{plan}");
    // Each candidate that fits says what its host tier would hold; one without it, nothing.
    let candidates = &plan.policy.as_ref().unwrap().candidates;
    for c in candidates.iter().filter(|c| c.micro.is_some()) {
        assert_eq!(
            c.predicted_host_peak.is_some(),
            c.policy.offloads(),
            "{c:?}"
        );
    }
    assert!(plan.to_string().contains("host tier peak"), "{plan}");
    assert!(
        plan.to_string()
            .contains("nothing without the host tier fits"),
        "{plan}"
    );
    trainer.train_step().unwrap();
    let device = trainer.device().allocator().stats().peak_in_use;
    assert_eq!(device, plan.predicted_peak, "{plan}");
    let host = trainer.host_tier().unwrap().allocator().stats().peak_in_use;
    assert_eq!(Some(host), plan.predicted_host_peak, "{plan}");
}

#[test]
fn a_run_that_offloads_writes_both_tiers_down() {
    let dir = TempDir::new("offload-run");
    let mut config = config(&dir);
    config.model.recompute = Some(Recompute::Blocks);
    config.model.offload_activations = Some(true);
    config.memory.history = 1000;
    config.steps = Some(2);
    let mut trainer = Trainer::builder()
        .config(config)
        .overwrite()
        .build()
        .unwrap();
    let summary = trainer.run(false).unwrap();
    assert!(summary.host_peak.is_some_and(|p| p > 0));
    let run_dir = trainer.run_dir().to_path_buf();
    let host_trace = std::fs::read_to_string(run_dir.join("memory-trace-host.json")).unwrap();
    assert!(
        host_trace.contains("activations"),
        "the host tier's allocations, by tag"
    );
    let plot = std::fs::read_to_string(run_dir.join("memory.svg")).unwrap();
    assert!(plot.contains("host tier (peak)"));
}

#[test]
fn streamed_weights_peak_on_each_tier_as_planned_and_train_the_same() {
    let dir = TempDir::new("offload-weights");
    for (in_backward, recompute, precision, activations) in [
        (false, Recompute::Blocks, PrecisionKind::F32, false),
        (true, Recompute::BlocksTiled, PrecisionKind::Bf16, true),
    ] {
        let mut config = config(&dir);
        config.model.recompute = Some(recompute);
        config.precision.dtype = precision;
        config.optimizer.clip = 0.0;
        config.optimizer.in_backward = Some(in_backward);
        let (kept, kept_losses) = two_steps(config.clone());
        config.model.offload_activations = Some(activations);
        config.model.offload_weights = Some(true);
        config.optimizer.offload = Some(true);
        let (streamed, losses) = two_steps(config);
        let case = format!("in backward {in_backward}, {recompute:?}, {precision:?}");
        let (device, host) =
            same_steps_as_planned((&kept, &kept_losses), (&streamed, &losses), &case);
        // Between steps the device keeps the embedding, the final norm and the head; the
        // blocks' weights live on the host.
        let model = streamed.model().module();
        let block_bytes: u64 = model
            .named_parameters()
            .iter()
            .filter(|(name, _)| name.starts_with("blocks."))
            .map(|(_, p)| (p.numel() * p.dtype().size()) as u64)
            .sum();
        let on = |stats: &headroom_alloc::Stats| live(stats, headroom_alloc::Tag::WEIGHTS);
        assert!(on(&host) >= block_bytes, "{case}: {host:?}");
        let all_on_device = on(&kept.device().allocator().stats());
        assert!(
            on(&device) + block_bytes <= all_on_device,
            "{case}: {device:?}"
        );
        assert!(
            device.peak_in_use < kept.device().allocator().stats().peak_in_use,
            "{case}"
        );
    }
}

#[test]
fn streamed_weights_need_the_optimizer_offloaded_and_whole_blocks() {
    let dir = TempDir::new("offload-weights-config");
    let mut config = config(&dir);
    config.model.offload_weights = Some(true);
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("set optimizer.offload = true"), "{err}");
    config.optimizer.offload = Some(true);
    config.model.recompute = Some(Recompute::CheapUp);
    let err = config.validate().unwrap_err().to_string();
    assert!(
        err.contains("model.offload_weights: streamed blocks are recomputed whole"),
        "{err}"
    );
    config.model.recompute = None;
    config.validate().unwrap();
}

#[test]
fn a_run_with_streamed_weights_resumes_on_the_same_trajectory() {
    let dir = TempDir::new("offload-weights-resume");
    let mut config = config(&dir);
    config.model.recompute = Some(Recompute::Blocks);
    config.model.offload_weights = Some(true);
    config.optimizer.offload = Some(true);
    config.batch.micro = Some(4);
    config.steps = Some(4);
    let mut straight = Trainer::new(config.clone()).unwrap();
    let losses: Vec<f64> = (0..4)
        .map(|_| straight.train_step().unwrap().loss)
        .collect();
    let mut stopped = Trainer::new(config.clone()).unwrap();
    for _ in 0..2 {
        stopped.train_step().unwrap();
    }
    stopped.save_checkpoint().unwrap();
    drop(stopped);
    let mut resumed = common::resume(config).unwrap();
    let again: Vec<f64> = (0..2).map(|_| resumed.train_step().unwrap().loss).collect();
    assert_eq!(again, losses[2..], "the resumed steps");
    // The checkpoint's block weights were restored on the host tier, never on the device.
    let host = resumed.host_tier().unwrap().allocator().stats();
    let on_host = host
        .tags
        .iter()
        .filter(|t| t.tag == headroom_alloc::Tag::WEIGHTS);
    assert!(on_host.map(|t| t.live).sum::<u64>() > 0, "{host:?}");
    let peak = |t: &Trainer| t.device().allocator().stats().peak_in_use;
    assert_eq!(peak(&resumed), peak(&straight));
}

#[test]
fn an_out_of_memory_with_streamed_weights_counts_what_the_device_holds() {
    let dir = TempDir::new("offload-weights-diagnosis");
    let mut config = config(&dir);
    // Weights that outweigh one sample's activations.
    (config.model.width, config.model.mlp_width) = (128, Some(512));
    config.model.context = Some(8);
    config.batch.size = 1;
    config.memory.policy = PolicyKind::Manual;
    config.model.recompute = Some(Recompute::Blocks);
    config.model.offload_weights = Some(true);
    config.optimizer.offload = Some(true);
    let roomy = Trainer::new(config.clone()).unwrap();
    let one_sample = roomy.plan().unwrap().predicted_peak;
    // The whole model with its gradients, as if it were on the device.
    let whole = headroom_nn::training_memory(roomy.model().module(), None).total();
    drop(roomy);
    let limit = one_sample - 4096;
    assert!(
        whole > limit,
        "the model alone ({whole}) must not fit {limit}"
    );
    config.memory.limit = Some(limit.into());
    let Err(err) = Trainer::new(config) else {
        panic!("{limit} bytes fit a step");
    };
    let err = err.to_string();
    assert!(
        err.contains("is left for activations") && !err.contains("alone exceed"),
        "{err}"
    );
}

#[test]
fn a_quantized_base_streams_with_its_adapters() {
    use headroom_nn::lora::{LoraConfig, QuantizedBase};
    let dir = TempDir::new("offload-qlora");
    for base in [QuantizedBase::Nf4, QuantizedBase::Int8] {
        let mut config = config(&dir);
        config.model.recompute = Some(Recompute::Blocks);
        config.precision.dtype = PrecisionKind::Bf16;
        config.optimizer.clip = 0.0;
        config.model.lora = Some(LoraConfig {
            rank: 4,
            alpha: 8.0,
            base: Some(base),
            ..LoraConfig::default()
        });
        let (kept, kept_losses) = two_steps(config.clone());
        config.model.offload_weights = Some(true);
        config.optimizer.offload = Some(true);
        let (streamed, losses) = two_steps(config);
        let case = format!("{base:?}");
        let (device, host) =
            same_steps_as_planned((&kept, &kept_losses), (&streamed, &losses), &case);
        // Between steps the blocks' codes (3 blocks of 12 288 values, 4 or 8 bits each) and
        // scales are the host's, with the adapters.
        let on = |stats: &headroom_alloc::Stats| live(stats, headroom_alloc::Tag::WEIGHTS);
        let kept_device = kept.device().allocator().stats();
        let adapters: u64 = streamed
            .model()
            .module()
            .named_parameters()
            .iter()
            .filter(|(name, _)| name.starts_with("blocks."))
            .map(|(_, p)| (p.numel() * p.dtype().size()) as u64)
            .sum();
        let bits = match base {
            QuantizedBase::Nf4 => 4,
            QuantizedBase::Int8 => 8,
        };
        let codes = 3 * 12_288 * bits / 8;
        assert!(
            on(&kept_device) - on(&device) >= adapters + codes,
            "{case}: {device:?}"
        );
        assert_eq!(
            on(&device) + on(&host),
            on(&kept_device),
            "{case}: the weights moved, none copied"
        );
        assert!(device.peak_in_use < kept_device.peak_in_use, "{case}");
    }
}

#[test]
fn a_cpu_plan_prices_the_offloaded_updates_in_turn_with_the_step() {
    let dir = TempDir::new("offload-seconds");
    let mut config = config(&dir);
    config.memory.policy = PolicyKind::Manual;
    config.model.recompute = Some(Recompute::Blocks);
    config.optimizer.clip = 0.0;
    let seconds = |offload: bool| {
        let mut config = config.clone();
        config.optimizer.offload = Some(offload);
        let trainer = Trainer::new(config).unwrap();
        trainer.plan().unwrap().predicted_seconds
    };
    // On a CPU the host tier's updates take the same cores: the offloaded step does the same
    // work and copies the parameters and gradients on top.
    let (on_device, offloaded) = (seconds(false), seconds(true));
    assert!(
        offloaded > on_device,
        "offloaded {offloaded} s, on the device {on_device} s"
    );
}

#[test]
fn fetched_in_turn_a_streamed_step_holds_less_peaks_as_planned_and_the_policy_takes_it_when_only_it_fits()
 {
    let dir = TempDir::new("offload-in-turn");
    let mut config = config(&dir);
    config.model.recompute = Some(Recompute::Blocks);
    config.optimizer.clip = 0.0;
    config.model.offload_activations = Some(true);
    config.model.offload_weights = Some(true);
    config.optimizer.offload = Some(true);
    let run = |ahead: bool| {
        let mut config = config.clone();
        config.model.fetch_ahead = Some(ahead);
        two_steps(config)
    };
    let ((ahead, ahead_losses), (in_turn, losses)) = (run(true), run(false));
    let (device, _) = same_steps_as_planned((&ahead, &ahead_losses), (&in_turn, &losses), "");
    let ahead_peak = ahead.device().allocator().stats().peak_in_use;
    assert!(
        device.peak_in_use < ahead_peak,
        "in turn {} against ahead {ahead_peak}",
        device.peak_in_use
    );
    // Under a limit a page short of the step of one sample that fetches ahead, the policy
    // brings the blocks back in turn.
    let one_sample = |ahead: bool| {
        let mut pinned = config.clone();
        pinned.memory.policy = PolicyKind::Manual;
        pinned.batch.size = 1;
        pinned.model.fetch_ahead = Some(ahead);
        Trainer::new(pinned).unwrap().plan().unwrap().predicted_peak
    };
    let (in_turn_one, ahead_one) = (one_sample(false), one_sample(true));
    assert!(in_turn_one < ahead_one, "{in_turn_one} against {ahead_one}");
    let mut tight = config.clone();
    tight.model.fetch_ahead = None;
    tight.batch.margin = Some(0.0);
    tight.memory.limit = Some((ahead_one - 4096).into());
    let trainer = Trainer::new(tight).unwrap();
    let plan = trainer.plan().unwrap();
    let chosen = &plan.policy.as_ref().unwrap().chosen;
    assert!(!chosen.fetch_ahead, "{plan}");
    assert!(plan.to_string().contains("all in turn"), "{plan}");
}
