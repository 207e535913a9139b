//! The memory policy: for a few limits, the techniques the planner chooses, pinned; what the
//! configuration sets stays; the run trains with the choice and a resume keeps it.

mod common;

use common::{TempDir, assert_mentions, error_of, resume, small_config};
use headroom_trainer::Trainer;
use headroom_trainer::config::{OptimizerKind, Recompute, StateKind, TrainConfig};
use headroom_trainer::planning::policy::{Candidate, Policy, PolicyPlan};

/// A two-block GPT wide enough, and batches small enough (4), that its gradients outweigh its
/// activations, no clipping (so the step in the backward pass may be chosen), the planner choosing
/// the micro-batch; the host tier apart (tests/offload.rs has it).
fn config(dir: &TempDir) -> TrainConfig {
    let mut config = small_config(dir);
    config.model.offload_activations = Some(false);
    config.optimizer.offload = Some(false);
    config.model.width = 128;
    config.model.layers = 2;
    config.batch.size = 4;
    config.batch.micro = None;
    config.optimizer.clip = 0.0;
    config
}

/// The policy part of the plan of `config` under `limit` bytes.
fn planned(config: &TrainConfig, limit: u64) -> (PolicyPlan, Trainer) {
    let mut config = config.clone();
    config.memory.limit = Some(limit.into());
    let trainer = Trainer::builder()
        .config(config)
        .overwrite()
        .build()
        .unwrap();
    let policy = trainer.plan().unwrap().policy.clone().unwrap();
    (policy, trainer)
}

/// The limit whose step limit (less the default margin of a tenth) is `peak` and a little.
fn limit_for(peak: u64) -> u64 {
    (peak as f64 / 0.9) as u64 + 4096
}

/// The candidate of `plan` with the techniques `policy`.
fn candidate(plan: &PolicyPlan, policy: Policy) -> &Candidate {
    plan.candidates
        .iter()
        .find(|c| c.policy == policy)
        .unwrap_or_else(|| panic!("no candidate {policy:?} in {plan}"))
}

fn policy(recompute: Recompute, in_backward: bool, state: StateKind) -> Policy {
    Policy {
        recompute,
        in_backward,
        state,
        offload_activations: false,
        offload_optimizer: false,
        offload_weights: false,
        fetch_ahead: true,
        shard_params: false,
    }
}

#[test]
fn the_chosen_techniques_for_a_few_limits() {
    let dir = TempDir::new("policy");
    let config = config(&dir);
    // Roomy: everything fits the whole batch; the plain step is the fastest.
    let (roomy, trainer) = planned(&config, 256 << 20);
    assert_eq!(
        roomy.chosen,
        policy(Recompute::None, false, StateKind::F32),
        "{roomy}"
    );
    assert_eq!(trainer.plan().unwrap().micro, 4);
    assert_eq!(roomy.candidates.len(), 8, "{roomy}");
    let peak = |p: Policy| candidate(&roomy, p).predicted_peak.unwrap();
    let plain = peak(policy(Recompute::None, false, StateKind::F32));
    let inside = peak(policy(Recompute::None, true, StateKind::F32));
    assert!(inside < plain, "{roomy}");
    assert!(
        roomy.candidates.iter().all(|c| c.micro == Some(4)),
        "{roomy}"
    );
    let seconds = |p: Policy| candidate(&roomy, p).predicted_seconds.unwrap();
    assert!(
        seconds(policy(Recompute::Blocks, false, StateKind::F32))
            > seconds(policy(Recompute::None, false, StateKind::F32))
    );

    // Room for the whole batch only with its updates in the backward pass: one micro-batch
    // beats two.
    let (tight, trainer) = planned(&config, limit_for(inside));
    assert_eq!(
        tight.chosen,
        policy(Recompute::None, true, StateKind::F32),
        "{tight}"
    );
    assert_eq!(trainer.plan().unwrap().micro, 4, "{tight}");
    assert_eq!(trainer.config().optimizer.in_backward, Some(true));

    // Below what any f32 state fits: the state narrows, and the plan says so.
    let mut manual = config.clone();
    manual.memory.policy = headroom_trainer::config::PolicyKind::Manual;
    manual.memory.limit = Some(headroom_alloc::ByteSize::mib(64));
    manual.batch.micro = Some(1);
    manual.model.recompute = Some(Recompute::Blocks);
    let mut one = Trainer::builder()
        .config(manual)
        .overwrite()
        .build()
        .unwrap();
    one.train_step().unwrap();
    let one_sample = one.device().allocator().stats().peak_in_use;
    let smallest_f32 = roomy
        .candidates
        .iter()
        .filter_map(|c| c.predicted_peak)
        .fold(one_sample, u64::min);
    let (narrow, trainer) = planned(&config, (smallest_f32 as f64 * 0.95) as u64);
    assert_ne!(narrow.chosen.state, StateKind::F32, "{narrow}");
    assert!(
        narrow.reason.contains("changes the optimization slightly"),
        "{narrow}"
    );
    assert_eq!(trainer.config().optimizer.state, Some(narrow.chosen.state));
}

#[test]
fn pinned_techniques_stay_and_the_run_trains_and_resumes_with_the_choice() {
    let dir = TempDir::new("policy-pinned");
    let mut config = config(&dir);
    config.model.recompute = Some(Recompute::Cheap);
    config.optimizer.clip = 1.0;
    let (pinned, _) = planned(&config, 256 << 20);
    assert!(
        pinned
            .candidates
            .iter()
            .all(|c| c.policy.recompute == Recompute::Cheap && !c.policy.in_backward),
        "{pinned}"
    );

    // A run under a limit that only the step in the backward pass fits in one micro-batch:
    // it trains so, writes it in its configuration, and a resume keeps it.
    let mut config = self::config(&dir);
    let (roomy, _) = planned(&config, 256 << 20);
    let inside = candidate(&roomy, policy(Recompute::None, true, StateKind::F32))
        .predicted_peak
        .unwrap();
    config.memory.limit = Some(limit_for(inside).into());
    config.steps = Some(2);
    config.checkpoint.every = 1;
    let mut trainer = Trainer::builder()
        .config(config.clone())
        .overwrite()
        .build()
        .unwrap();
    trainer.run(false).unwrap();
    let written = std::fs::read_to_string(dir.0.join("config.toml")).unwrap();
    assert!(written.contains("in_backward = true"), "{written}");
    // Loading a checkpoint holds its arrays beside the model's for a moment: a roomier limit
    // (memory settings may change on a resume). The plan does not run again.
    config.steps = Some(3);
    config.memory.limit = Some(headroom_alloc::ByteSize::mib(64));
    let resumed = resume(config).unwrap();
    assert_eq!(resumed.config().optimizer.in_backward, Some(true));
    assert_eq!(resumed.steps_done(), 2);
}

/// When nothing fits, the error names what kept the update in the backward pass out (clipping,
/// and a batch that does not fit in one micro-batch) and what fits without it, which plans.
#[test]
fn when_nothing_fits_the_error_names_what_kept_the_update_in_the_backward_pass_out() {
    let dir = TempDir::new("policy-kept-out");
    let mut config = config(&dir);
    config.optimizer.kind = OptimizerKind::Sgd;
    // One sample: the update after it against the update in its backward pass, both with the
    // blocks recomputed (the least memory), under a roomy limit.
    let mut one = config.clone();
    one.batch.size = 1;
    let (roomy, _) = planned(&one, 256 << 20);
    let peak = |in_backward| {
        candidate(
            &roomy,
            policy(Recompute::Blocks, in_backward, StateKind::F32),
        )
        .predicted_peak
        .unwrap()
    };
    let (after, inside) = (peak(false), peak(true));
    assert!(limit_for(inside) < after, "{inside} against {after}");
    // A limit that one sample's update after its backward pass exceeds, and that the update
    // in the backward pass fits with the margin; clipping on, a batch of 64.
    config.memory.limit = Some(((limit_for(inside) + after) / 2).into());
    config.optimizer.clip = 1.0;
    config.batch.size = 64;
    let message = error_of(
        Trainer::builder()
            .config(config.clone())
            .overwrite()
            .build(),
    );
    eprintln!("{message}");
    assert_mentions(
        &message,
        &[
            "not even a micro-batch of one sample fits",
            "the update in the backward pass",
            "clipping",
            "several",
            "blocks recomputed, MLPs tiled, update in backward",
            "--clip 0",
        ],
    );
    // What it says fits does, and the planner then chooses the update in the backward pass.
    let batch: usize = message
        .split("--batch-size ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no batch size in: {message}"));
    assert!((1..64).contains(&batch), "{message}");
    config.optimizer.clip = 0.0;
    config.batch.size = batch;
    let trainer = Trainer::builder()
        .config(config)
        .overwrite()
        .build()
        .unwrap();
    let chosen = trainer.plan().unwrap().policy.clone().unwrap().chosen;
    assert!(chosen.in_backward, "{chosen:?}");
}
