//! Out-of-memory in the middle of a step: recovered with no sample lost or repeated, the bytes
//! in use back where they were, and the same weights as the same micro-batches without the
//! failure; and a run whose first micro-batch cannot fit converges to one that can.

mod common;

use common::{TempDir, small_config, weights};
use headroom_alloc::OomCause;
use headroom_trainer::{Phase, Trainer};

#[test]
fn an_oom_at_every_allocation_of_a_step_is_recovered_exactly() {
    let dir = TempDir::new("inject");
    let mut config = small_config(&dir);
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
    let mut roomy = small_config(&dir);
    roomy.steps = Some(6);
    roomy.batch.size = 32;
    roomy.batch.micro = Some(32);
    // A limit between the peaks of micro-batches of 4 and of 32.
    let peak_with = |micro: usize| {
        let mut config = roomy.clone();
        config.batch.micro = Some(micro);
        let mut trainer = Trainer::new(config).unwrap();
        trainer.train_step().unwrap();
        trainer.device().allocator().stats().peak_in_use
    };
    let (low, high) = (peak_with(4), peak_with(32));
    assert!(low < high, "{low} against {high}");
    let limit = (low + high) / 2;
    let mut tight = roomy.clone();
    tight.memory.limit = Some(format!("{limit}B"));
    let mut free = Trainer::new(roomy).unwrap();
    let mut constrained = Trainer::new(tight).unwrap();
    let mut recovered = 0;
    for _ in 0..6 {
        let a = free.train_step().unwrap();
        let b = constrained.train_step().unwrap();
        recovered += b.ooms.len();
        assert!(
            (a.loss - b.loss).abs() <= 1e-4 * a.loss.abs().max(1.0),
            "{} against {}",
            a.loss,
            b.loss
        );
        let peak = constrained.device().allocator().stats().peak_in_use;
        assert!(peak <= limit, "peak {peak} above the limit {limit}");
    }
    assert!(recovered > 0, "the limit forced smaller micro-batches");
    assert!(
        constrained.micro_batch() < 32,
        "converged to {}",
        constrained.micro_batch()
    );
    let (w1, w2) = (weights(&free), weights(&constrained));
    for (a, b) in w1.iter().flatten().zip(w2.iter().flatten()) {
        let (a, b) = (f64::from_bits(*a), f64::from_bits(*b));
        assert!((a - b).abs() <= 1e-4 * a.abs().max(1e-2), "{a} against {b}");
    }
}
