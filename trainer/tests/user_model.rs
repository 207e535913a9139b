//! A model of the user's own, neither of the built-ins, trained through [`ModelFactory`]: the
//! planner picks its micro-batch under a tight limit, an out-of-memory injected mid-step is
//! recovered with the weights of a run without it, a resume continues the same trajectory bit
//! for bit, and autocast runs its products in bf16.

mod common;
#[path = "../examples/01-your-own-model/model.rs"]
mod model;

use std::sync::Arc;

use common::TempDir;
use headroom_trainer::Trainer;
use headroom_trainer::config::{PrecisionKind, Recompute, ScheduleKind, TrainConfig};
use headroom_trainer::data::{Metric, Task};
use model::{ResidualMlpFactory, quadrants};

fn factory() -> ResidualMlpFactory {
    ResidualMlpFactory {
        width: 64,
        depth: 2,
        offer_recompute: false,
    }
}

fn task() -> Task {
    Task {
        train: Arc::new(quadrants(512, 1)),
        eval: Arc::new(quadrants(128, 2)),
        metric: Metric::Accuracy,
    }
}

/// Batches of 256 under a limit their one-micro-batch step does not fit, at a constant rate
/// (so that a shorter run is the start of a longer one).
fn config(dir: &TempDir, steps: u64) -> TrainConfig {
    let mut config = TrainConfig {
        run_dir: Some(dir.0.clone()),
        steps: Some(steps),
        eval_every: 0,
        ..TrainConfig::default()
    };
    config.checkpoint.every = 0;
    config.batch.size = 256;
    config.batch.micro = None;
    config.optimizer.lr = 1e-2;
    config.optimizer.schedule = ScheduleKind::Constant;
    config.memory.limit = Some(headroom_alloc::ByteSize::kib(1700));
    config.memory.history = 0;
    config.memory.trace = false;
    config
}

fn weights(trainer: &Trainer) -> Vec<Vec<f64>> {
    trainer
        .model()
        .module()
        .parameters()
        .iter()
        .map(|p| p.to_f64().unwrap())
        .collect()
}

#[test]
fn the_planner_fits_a_user_model_under_a_tight_limit_and_it_learns() {
    let dir = TempDir::new("user-model-plan");
    let mut trainer = Trainer::builder()
        .config(config(&dir, 40))
        .task(task())
        .model(factory())
        .build()
        .unwrap();
    let plan = trainer.plan().expect("the planner ran").clone();
    assert!(
        plan.micro < 256,
        "the batch does not fit at once: {}",
        plan.micro
    );
    let summary = trainer.run(false).unwrap();
    assert_eq!(summary.first_step_peak, Some(plan.predicted_peak));
    let accuracy = summary.metric.unwrap();
    assert!(accuracy > 0.8, "held-out accuracy {accuracy}");
}

#[test]
fn an_injected_out_of_memory_mid_step_gives_the_weights_of_a_run_without_it() {
    let dir = TempDir::new("user-model-oom");
    let mut config = config(&dir, 1);
    config.batch.micro = Some(32);
    config.memory.limit = Some(headroom_alloc::ByteSize::mib(64));
    let mut failed = Trainer::builder()
        .config(config.clone())
        .task(task())
        .model(factory())
        .build()
        .unwrap();
    failed.device().allocator().with(|a| a.inject_oom(40));
    let report = failed.train_step().unwrap();
    assert_eq!(report.ooms.len(), 1, "one failure, recovered");
    let replay_dir = TempDir::new("user-model-oom-replay");
    config.run_dir = Some(replay_dir.0.clone());
    let mut replay = Trainer::builder()
        .config(config)
        .task(task())
        .model(factory())
        .build()
        .unwrap();
    replay.train_step_with(&report.micro_sizes).unwrap();
    assert_eq!(weights(&failed), weights(&replay));
}

#[test]
fn a_resumed_user_model_follows_the_unbroken_run_bit_for_bit() {
    let unbroken_dir = TempDir::new("user-model-unbroken");
    let mut unbroken = Trainer::builder()
        .config(config(&unbroken_dir, 6))
        .task(task())
        .model(factory())
        .build()
        .unwrap();
    unbroken.run(false).unwrap();

    let dir = TempDir::new("user-model-resumed");
    let mut first = Trainer::builder()
        .config(config(&dir, 3))
        .task(task())
        .model(factory())
        .build()
        .unwrap();
    first.run(false).unwrap();
    let mut resumed = Trainer::builder()
        .config(config(&dir, 6))
        .task(task())
        .model(factory())
        .resume()
        .build()
        .unwrap();
    assert_eq!(resumed.steps_done(), 3);
    resumed.run(false).unwrap();
    assert_eq!(weights(&resumed), weights(&unbroken));
}

#[test]
fn a_user_model_trains_under_bf16_autocast() {
    let dir = TempDir::new("user-model-bf16");
    let mut config = config(&dir, 20);
    config.precision.dtype = PrecisionKind::Bf16;
    let mut trainer = Trainer::builder()
        .config(config)
        .task(task())
        .model(factory())
        .build()
        .unwrap();
    let first = trainer.train_step().unwrap().loss;
    let summary = trainer.run(false).unwrap();
    assert!(summary.final_loss.is_finite() && summary.final_loss < first);
}

#[test]
fn the_policy_offers_a_user_model_only_the_techniques_it_declares() {
    let recomputes = |offer_recompute: bool| {
        let dir = TempDir::new("user-model-knobs");
        let factory = ResidualMlpFactory {
            offer_recompute,
            ..factory()
        };
        let trainer = Trainer::builder()
            .config(config(&dir, 1))
            .task(task())
            .model(factory)
            .build()
            .unwrap();
        let policy = trainer
            .plan()
            .unwrap()
            .policy
            .clone()
            .expect("the auto policy");
        let mut offered: Vec<Recompute> = policy
            .candidates
            .iter()
            .map(|c| c.policy.recompute)
            .collect();
        offered.dedup();
        offered
    };
    assert_eq!(recomputes(false), [Recompute::None]);
    assert!(recomputes(true).contains(&Recompute::Blocks));
}

#[test]
fn a_user_models_own_recomputation_keeps_the_step_and_lowers_its_peak() {
    let step = |recompute: Recompute| {
        let dir = TempDir::new("user-model-recompute");
        let mut config = config(&dir, 1);
        config.batch.micro = Some(256);
        config.memory.limit = Some(headroom_alloc::ByteSize::mib(64));
        config.model.recompute = Some(recompute);
        let factory = ResidualMlpFactory {
            offer_recompute: true,
            ..factory()
        };
        let mut trainer = Trainer::builder()
            .config(config)
            .task(task())
            .model(factory)
            .build()
            .unwrap();
        trainer.train_step().unwrap();
        let peak = trainer.device().allocator().stats().peak_in_use;
        (weights(&trainer), peak)
    };
    let (plain, plain_peak) = step(Recompute::None);
    let (recomputed, recomputed_peak) = step(Recompute::Blocks);
    assert_eq!(plain, recomputed, "the same step, bit for bit");
    assert!(
        recomputed_peak < plain_peak,
        "{recomputed_peak} < {plain_peak}"
    );
}
