//! AdamW's moments kept in bf16 or in 8 bits: the GPT follows the f32 state's trajectory within
//! tolerance, with a fraction of its memory.

mod common;

use common::{TempDir, small_config};
use headroom_trainer::Trainer;
use headroom_trainer::config::StateKind;

#[test]
fn narrow_state_follows_the_full_states_losses_with_a_fraction_of_its_bytes() {
    let dir = TempDir::new("state");
    let steps = 60;
    let run = |state: StateKind| {
        let mut config = small_config(&dir);
        config.steps = Some(steps);
        config.model.width = 32;
        config.optimizer.state = Some(state);
        let mut trainer = Trainer::builder()
            .config(config)
            .overwrite()
            .build()
            .unwrap();
        let losses: Vec<f64> = (0..steps)
            .map(|_| trainer.train_step().unwrap().loss)
            .collect();
        let stats = trainer.device().allocator().stats();
        let state_bytes = stats
            .tags
            .iter()
            .find(|t| t.tag == headroom_alloc::Tag::OPTIMIZER_STATE)
            .map_or(0, |t| t.live);
        (losses, state_bytes)
    };
    let (full, full_bytes) = run(StateKind::F32);
    let tail = |losses: &[f64]| losses[losses.len() - 10..].iter().sum::<f64>() / 10.0;
    assert!(
        tail(&full) < 0.8 * full[0],
        "the f32 state learns: {} to {}",
        full[0],
        tail(&full)
    );
    // Shares of the f32 state's bytes: a half and a quarter, above them because the small
    // model's biases and the 8-bit scales take a 256-byte granule each.
    for (state, share, tolerance) in [(StateKind::Bf16, 0.55, 0.03), (StateKind::Int8, 0.4, 0.06)] {
        let (losses, bytes) = run(state);
        eprintln!(
            "{state:?}: last losses {:.4} against {:.4}, {bytes} bytes of state against {full_bytes}",
            tail(&losses),
            tail(&full)
        );
        assert!(
            (bytes as f64) <= share * full_bytes as f64,
            "{state:?}: {bytes} bytes against {full_bytes}"
        );
        for (step, (a, b)) in full.iter().zip(&losses).enumerate() {
            assert!(
                (a - b).abs() <= tolerance * a,
                "{state:?}, step {step}: {b} against {a}"
            );
        }
    }
}
