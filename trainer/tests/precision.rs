//! Mixed precision: an overflowing f16 step is skipped and halves the loss scale; bf16 and f16
//! runs reach the f32 run's loss.

mod common;

use common::{TempDir, small_config, weights};
use headroom_trainer::Trainer;
use headroom_trainer::config::PrecisionKind;
use headroom_trainer::step::ScaleChange;

#[test]
fn an_infinite_gradient_skips_the_step_and_halves_the_scale() {
    let dir = TempDir::new("f16");
    let mut config = small_config(&dir);
    config.precision.dtype = PrecisionKind::F16;
    let mut trainer = Trainer::new(config).unwrap();
    assert_eq!(trainer.loss_scaler().scale, 65536.0);
    trainer.train_step().unwrap();
    // A scale no f16 gradient survives: the backward pass overflows to infinity.
    trainer.set_loss_scale(1e30);
    let before = weights(&trainer);
    let report = trainer.train_step().unwrap();
    assert!(report.skipped && !report.grad_norm.is_finite());
    assert_eq!(report.scale_change, ScaleChange::Backoff);
    assert_eq!(trainer.loss_scaler().scale, 5e29);
    assert_eq!(
        weights(&trainer),
        before,
        "a skipped step leaves the weights alone"
    );
    trainer.set_loss_scale(1024.0);
    let report = trainer.train_step().unwrap();
    assert!(!report.skipped);
    assert_ne!(weights(&trainer), before);
}

#[test]
fn bf16_and_f16_runs_reach_the_f32_runs_loss() {
    let dir = TempDir::new("precisions");
    let mut config = small_config(&dir);
    // Long enough for every precision to leave the plateaus that a run this small meets on its
    // way (at 400 steps one run in a few, of any precision, is still on one).
    config.steps = Some(600);
    config.model.width = 32;
    config.batch.size = 32;
    config.batch.micro = Some(32);
    config.optimizer.lr = 1e-2;
    let final_loss = |dtype: PrecisionKind| {
        let mut config = config.clone();
        config.precision.dtype = dtype;
        let mut trainer = Trainer::new(config).unwrap();
        let losses: Vec<f64> = (0..600)
            .map(|_| trainer.train_step().unwrap().loss)
            .collect();
        let tail = &losses[580..];
        eprintln!(
            "{dtype:?}: {} to {}",
            losses[0],
            tail.iter().sum::<f64>() / tail.len() as f64
        );
        (losses[0], tail.iter().sum::<f64>() / tail.len() as f64)
    };
    let (start, f32_loss) = final_loss(PrecisionKind::F32);
    assert!(
        f32_loss < 0.7 * start,
        "the f32 run learns: {start} to {f32_loss}"
    );
    for dtype in [PrecisionKind::Bf16, PrecisionKind::F16] {
        let (_, loss) = final_loss(dtype);
        assert!(
            (loss - f32_loss).abs() <= 0.005,
            "{dtype:?} ends at {loss}, f32 at {f32_loss}"
        );
    }
}
