//! The planner: the peak it predicts on the meta device is the peak the first real step hits,
//! and it picks the largest micro-batch that fits the limit with the margin.

mod common;

use common::{TempDir, small_config};
use headroom_trainer::Trainer;

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
    config.memory.limit = Some(format!("{}B", plan.predicted_peak * 3 / 4));
    let mut tight = Trainer::new(config).unwrap();
    let plan = tight.plan().unwrap().clone();
    assert!(plan.micro > 1 && plan.micro < 64, "{plan}");
    assert!(plan.predicted_peak <= plan.target);
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
    config.memory.limit = Some(format!("{}B", whole * 3 / 4));

    let mut plans = Vec::new();
    let mut losses = Vec::new();
    for recompute in [false, true] {
        let mut config = config.clone();
        config.model.recompute = recompute;
        let mut trainer = Trainer::new(config).unwrap();
        let plan = trainer.plan().unwrap().clone();
        let loss = trainer.train_step().unwrap().loss;
        let measured = trainer.device().allocator().stats().peak_in_use;
        assert_eq!(
            measured, plan.predicted_peak,
            "recompute {recompute}: {plan}"
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
    // The same step in other micro-batches: equal to float tolerance.
    assert!((losses[0] - losses[1]).abs() < 1e-4, "{losses:?}");
}
