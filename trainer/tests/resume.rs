//! Checkpoints: a run resumed from one ends with the same weights as a run never stopped
//! (tests/kill.rs kills the command line's runs).

mod common;

use common::{TempDir, small_config, weights};
use headroom_trainer::Trainer;

#[test]
fn a_resumed_run_continues_the_same_trajectory_bit_for_bit() {
    let dir = TempDir::new("resume");
    let mut config = small_config(&dir);
    config.steps = Some(12);
    config.model.dropout = 0.1;
    config.batch.size = 16;
    config.batch.micro = Some(16);
    let mut stopped = Trainer::new(config.clone()).unwrap();
    let mut schedule = Vec::new();
    for step in 0..6 {
        if step == 2 {
            // An out-of-memory changes the micro-batch state that the checkpoint must carry.
            stopped.device().allocator().with(|a| a.inject_oom(40));
        }
        schedule.push(stopped.train_step().unwrap().micro_sizes);
    }
    assert_eq!(stopped.micro_batch(), 8, "the OOM halved the micro-batch");
    stopped.save_checkpoint().unwrap();
    drop(stopped);
    let mut resumed = Trainer::resume(config.clone()).unwrap();
    assert_eq!((resumed.steps_done(), resumed.micro_batch()), (6, 8));
    for _ in 6..12 {
        schedule.push(resumed.train_step().unwrap().micro_sizes);
    }
    // A run never stopped, cutting its batches the same way (an OOM changes how, not what).
    let straight_dir = TempDir::new("resume-straight");
    config.run_dir = Some(straight_dir.0.clone());
    let mut straight = Trainer::new(config).unwrap();
    for sizes in &schedule {
        straight.train_step_with(sizes).unwrap();
    }
    assert!(
        weights(&resumed) == weights(&straight),
        "the weights differ"
    );
}
