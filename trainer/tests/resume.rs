//! Checkpoints: a run resumed from one ends with the same weights as a run never stopped
//! (tests/kill.rs kills the command line's runs).

mod common;

use common::{TempDir, resume, small_config, weights};
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
    let mut resumed = resume(config.clone()).unwrap();
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

/// `headroom train ARGS` with the log at the info level; its standard error.
fn train_logged(args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_headroom"))
        .arg("train")
        .args(args)
        .env("HEADROOM_LOG", "info")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    stderr
}

#[test]
fn a_resume_starts_from_the_runs_own_settings_and_changes_only_what_its_flags_name() {
    let dir = TempDir::new("resume-settings");
    let run = common::text(&dir.0);
    let flags = [
        "--run-dir",
        run,
        "--batch-size",
        "16",
        "--seed",
        "3",
        "--memory-limit",
        "48MiB",
        "--checkpoint-every",
        "2",
        "--eval-every",
        "0",
    ];
    train_logged(&[&flags[..], &["--steps", "3"]].concat());
    // Only --steps named: every other setting is the run's, not a default.
    let log = train_logged(&[
        "--resume",
        "--run-dir",
        run,
        "--steps",
        "5",
        "--eval-every",
        "0",
    ]);
    assert!(
        log.contains("resuming with a change: steps: 3 -> 5"),
        "{log}"
    );
    assert_eq!(log.matches("resuming with a change").count(), 1, "{log}");
    let saved = std::fs::read_to_string(dir.0.join("config.toml")).unwrap();
    let config: headroom_trainer::config::TrainConfig = toml::from_str(&saved).unwrap();
    assert_eq!(
        (
            config.seed,
            config.batch.size,
            config.checkpoint.every,
            config.steps
        ),
        (3, 16, 2, Some(5))
    );
    assert_eq!(
        config.memory.limit.as_ref().map(|limit| limit.as_str()),
        Some("48MiB")
    );
    // Repeating the first run's flags changes nothing but what differs.
    let again = [&flags[..], &["--resume", "--steps", "6"]].concat();
    let log = train_logged(&again);
    assert!(log.contains("steps: 5 -> 6"), "{log}");
    assert_eq!(log.matches("resuming with a change").count(), 1, "{log}");
}
