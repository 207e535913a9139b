//! Checkpoints: a run resumed from one ends with the same weights as a run never stopped,
//! killed mid-run or not.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{TempDir, assert_same_checkpoints, small_config, weights};
use headroom_trainer::{Trainer, checkpoint_path};

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

#[test]
fn a_killed_run_resumed_from_its_checkpoint_ends_with_the_same_weights() {
    let straight_dir = TempDir::new("straight");
    let killed_dir = TempDir::new("killed");
    let write_config = |dir: &TempDir| {
        let mut config = small_config(dir);
        config.steps = Some(400);
        config.checkpoint.every = 10;
        let path = dir.0.join("run.toml");
        std::fs::write(&path, config.to_toml()).unwrap();
        path
    };
    let headroom = env!("CARGO_BIN_EXE_headroom");
    let straight = Command::new(headroom)
        .args(["train", "--quiet", "--config"])
        .arg(write_config(&straight_dir))
        .output()
        .unwrap();
    assert!(
        straight.status.success(),
        "{}",
        String::from_utf8_lossy(&straight.stderr)
    );

    let config = write_config(&killed_dir);
    let mut child = Command::new(headroom)
        .args(["train", "--quiet", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !checkpoint_path(&killed_dir.0).exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no checkpoint appeared"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run was still going when killed"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let resumed = Command::new(headroom)
        .args(["train", "--quiet", "--resume", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert_same_checkpoints(&straight_dir.0, &killed_dir.0);
}
