//! Out-of-memory in the middle of a step: recovered with no sample lost or repeated, the bytes
//! in use back where they were, and the same weights as the same micro-batches without the
//! failure; and a run whose first micro-batch cannot fit converges to one that can.

mod common;

use common::{TempDir, assert_recovers_like, small_config, tight_limit_of, weights};
use headroom_alloc::OomCause;
use headroom_trainer::Trainer;
use headroom_trainer::config::Warmup;
use headroom_trainer::step::Phase;

#[test]
fn an_oom_at_every_allocation_of_a_step_is_recovered_exactly() {
    recovers_an_oom_at_every_allocation_exactly("inject", 8);
}

/// A micro-batch that fails after adding part of its gradients into the step's (the second of
/// two) starts the step over: the result is still that of the micro-batches reported.
#[test]
fn an_oom_at_every_allocation_of_a_step_in_two_micro_batches_is_recovered_exactly() {
    recovers_an_oom_at_every_allocation_exactly("inject-two", 4);
}

/// One step of `small_config` in micro-batches of `micro`, with an out-of-memory injected at
/// each of its allocations in turn: each recovered with every sample once, the bytes in use as
/// before, and the weights of the same micro-batches without the failure.
fn recovers_an_oom_at_every_allocation_exactly(name: &str, micro: usize) {
    let dir = TempDir::new(name);
    let mut config = small_config(&dir);
    config.batch.micro = Some(micro);
    config.model.dropout = 0.1; // a failed attempt must not shift the masks of the retry
    let mut clean = Trainer::new(config.clone()).unwrap();
    let before = clean.device().allocator().stats();
    let clean_report = clean.train_step().unwrap();
    let after = clean.device().allocator().stats();
    let allocations = after.allocations - before.allocations;
    assert!(allocations > 50, "a step allocates: {allocations}");
    assert_eq!(
        after.in_use, before.in_use,
        "a step leaves the bytes in use as it found them"
    );
    let batch: Vec<usize> = {
        let mut i = clean_report.indices.clone();
        i.sort_unstable();
        i
    };
    let mut phases = [0usize; 2];
    for k in 0..allocations {
        let mut trainer = Trainer::new(config.clone()).unwrap();
        let baseline = trainer.device().allocator().stats().in_use;
        trainer.device().allocator().with(|a| a.inject_oom(k));
        let report = trainer
            .train_step()
            .unwrap_or_else(|e| panic!("allocation {k}: {e}"));
        assert_eq!(report.ooms.len(), 1, "allocation {k}");
        assert_eq!(report.ooms[0].report.cause, OomCause::Injected);
        phases[usize::from(report.ooms[0].phase == Phase::Optimizer)] += 1;
        let mut seen = report.indices.clone();
        seen.sort_unstable();
        assert_eq!(seen, batch, "allocation {k}: every sample once");
        assert_eq!(
            trainer.device().allocator().stats().in_use,
            baseline,
            "allocation {k}"
        );
        trainer.device().allocator().with(|a| a.validate()).unwrap();
        // The same micro-batches without a failure give the same weights, bit for bit.
        let mut replay = Trainer::new(config.clone()).unwrap();
        replay.train_step_with(&report.micro_sizes).unwrap();
        assert_eq!(
            weights(&trainer),
            weights(&replay),
            "allocation {k}: {:?}",
            report.micro_sizes
        );
        if report.micro_sizes == clean_report.micro_sizes {
            assert_eq!(weights(&trainer), weights(&clean), "allocation {k}");
        }
    }
    assert!(
        phases[0] > 0 && phases[1] > 0,
        "failures hit micro-batches and the update: {phases:?}"
    );
}

#[test]
fn a_first_micro_batch_that_cannot_fit_shrinks_and_trains_like_an_unconstrained_run() {
    let dir = TempDir::new("small-limit");
    // Its tolerance is for a run that warms up over all six steps: the micro-batches' rounding
    // grows with the learning rate.
    let mut config = small_config(&dir);
    config.optimizer.warmup = Warmup::Steps(6);
    let (roomy, tight, limit) = tight_limit_of(config, 6);
    let mut free = Trainer::new(roomy).unwrap();
    let mut constrained = Trainer::new(tight).unwrap();
    assert_recovers_like(&mut free, &mut constrained, 6, limit, 1e-4);
}
